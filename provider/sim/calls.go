package sim

import (
	"sort"
	"sync"
)

// Calls is what the provider was asked under one idempotency key: every
// Charge and Lookup that reached it, whatever it answered. A deduping
// provider turns many charge calls into one charge; these counts show the
// calls themselves, so a test can see an owner that should not have called.
type Calls struct {
	IdempotencyKey string `json:"idempotency_key"`
	Charges        int    `json:"charges"`
	Lookups        int    `json:"lookups"`
	Refunds        int    `json:"refunds,omitempty"`
	RefundLookups  int    `json:"refund_lookups,omitempty"`
}

type op int

const (
	opCharge op = iota
	opLookup
	opRefund
	opRefundLookup
)

// MaxCallKeys bounds the call log: the keys called most recently are
// kept, at least half as many, so a provider that runs for days (a demo, a
// benchmark) holds a bounded amount of memory.
const MaxCallKeys = 100_000

// callLog counts calls by key since the provider was opened. It lives in
// memory: the ledger is the bank's record, the calls are the test's. Counts
// are kept by value, so the collector scans one pointer a key (its string).
type callLog struct {
	mu       sync.Mutex
	cur, old map[string]counts // the keys called lately, and the half before
}

// counts are a key's calls, by op.
type counts [4]int

func (l *callLog) add(key string, o op) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.cur[key]
	if !ok {
		c = l.old[key]
		delete(l.old, key)
		if l.cur == nil || len(l.cur) >= MaxCallKeys/2 {
			l.old, l.cur = l.cur, map[string]counts{}
		}
	}
	c[o]++
	l.cur[key] = c
}

// Calls returns the calls received since the provider was opened, by key,
// in key order: of the keys called lately (see MaxCallKeys).
func (s *Sim) Calls() []Calls {
	s.calls.mu.Lock()
	all := make([]Calls, 0, len(s.calls.cur)+len(s.calls.old))
	for _, m := range []map[string]counts{s.calls.old, s.calls.cur} {
		for key, c := range m {
			all = append(all, Calls{IdempotencyKey: key, Charges: c[opCharge], Lookups: c[opLookup],
				Refunds: c[opRefund], RefundLookups: c[opRefundLookup]})
		}
	}
	s.calls.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].IdempotencyKey < all[j].IdempotencyKey })
	return all
}
