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

// callLog counts calls by key since the provider was opened. It lives in
// memory: the ledger is the bank's record, the calls are the test's.
type callLog struct {
	mu    sync.Mutex
	byKey map[string]*Calls
}

func (l *callLog) add(key string, o op) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.byKey[key]
	if c == nil {
		if l.byKey == nil {
			l.byKey = map[string]*Calls{}
		}
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
// in key order.
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
