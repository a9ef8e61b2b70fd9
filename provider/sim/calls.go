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

// MaxCallKeys bounds the call log: the calls of the keys called most
// recently first, older keys forgotten, so a provider that runs for days
// (a demo, a benchmark) holds a bounded amount of memory.
const MaxCallKeys = 100_000

// callLog counts calls by key since the provider was opened, for the last
// MaxCallKeys keys first called. It lives in memory: the ledger is the
// bank's record, the calls are the test's.
type callLog struct {
	mu    sync.Mutex
	byKey map[string]*Calls
	order []string // keys in the order first called, a ring of MaxCallKeys
	next  int      // where the next new key goes in order
}

func (l *callLog) add(key string, o op) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.byKey[key]
	if c == nil {
		if l.byKey == nil {
			l.byKey = map[string]*Calls{}
		}
		if len(l.order) < MaxCallKeys {
			l.order = append(l.order, key)
		} else {
			delete(l.byKey, l.order[l.next])
			l.order[l.next] = key
		}
		l.next = (l.next + 1) % MaxCallKeys
		c = &Calls{IdempotencyKey: key}
		l.byKey[key] = c
	}
	switch o {
	case opCharge:
		c.Charges++
	case opLookup:
		c.Lookups++
	case opRefund:
		c.Refunds++
	case opRefundLookup:
		c.RefundLookups++
	}
}

// Calls returns the calls received since the provider was opened, by key,
// in key order: of the last MaxCallKeys keys first called.
func (s *Sim) Calls() []Calls {
	s.calls.mu.Lock()
	all := make([]Calls, 0, len(s.calls.byKey))
	for _, c := range s.calls.byKey {
		all = append(all, *c)
	}
	s.calls.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].IdempotencyKey < all[j].IdempotencyKey })
	return all
}
