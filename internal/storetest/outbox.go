package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// events returns every event of scope, newest first.
func events(t *testing.T, s payment.Store, scope string) []payment.OutboxEvent {
	t.Helper()
	es, err := s.OutboxEvents(context.Background(), payment.OutboxFilter{Scope: scope, Limit: 1000})
	if err != nil {
		t.Fatalf("OutboxEvents(%s): %v", scope, err)
	}
	return es
}

// eventsOf returns the types of the events about object id, oldest first.
func eventsOf(t *testing.T, s payment.Store, scope, id string) []payment.EventType {
	t.Helper()
	var types []payment.EventType
	for _, e := range slices.Backward(events(t, s, scope)) {
		if e.ObjectID == id {
			types = append(types, e.Type)
		}
	}
	return types
}

// withEvent is o carrying the event of its change on a at at.
func withEvent(a *payment.Attempt, o payment.Outcome, at time.Time) payment.Outcome {
	o.Event = payment.ChangeEvent(*a, o, at)
	return o
}

// Every change Record, Queue and Forwarded make writes the event it is
// given, once, with it: a refused change (fenced out, settled already,
// over the offline limits) writes none. What is read back is what was
// written, byte for byte.
func testOutboxEventPerChange(t *testing.T, h Harness) {
	ctx, s := context.Background(), h.Store
	a := NewAttempt("pay", t0, time.Minute)
	mustClaim(t, s, a)
	charged := payment.SucceededOutcome(*a, payment.Charge{ID: "ch_1"})
	if ok, err := s.Record(ctx, payment.KindPayment, "s", "pay", 2, withEvent(a, charged, t0), t0); ok || err != nil {
		t.Fatalf("Record under another fence = %v, %v, want fenced out", ok, err)
	}
	if got := eventsOf(t, s, "s", a.ID); len(got) != 0 {
		t.Fatalf("events after a fenced-out record = %v, want none", got)
	}
	o := withEvent(a, charged, t0.Add(time.Second))
	if ok, err := s.Record(ctx, payment.KindPayment, "s", "pay", 1, o, t0.Add(time.Second)); !ok || err != nil {
		t.Fatalf("Record = %v, %v", ok, err)
	}
	again := payment.NotCompletedOutcome(*a)
	if ok, err := s.Record(ctx, payment.KindPayment, "s", "pay", 1, withEvent(a, again, t0), t0); ok || err != nil {
		t.Fatalf("a second Record = %v, %v, want refused", ok, err)
	}
	es := events(t, s, "s")
	if len(es) != 1 {
		t.Fatalf("events = %d, want the one of the record", len(es))
	}
	want := *o.Event
	if got := es[0]; got.ID != want.ID || got.Scope != "s" || got.Type != payment.EventPaymentSucceeded || got.ObjectID != a.ID ||
		!got.CreatedAt.Equal(t0.Add(time.Second)) || string(got.Body) != string(want.Body) {
		t.Errorf("event = %+v\nwant %+v", got, want)
	}

	r := refundAttempt("refund", a.ID, 300)
	mustClaim(t, s, r)
	declined := payment.Outcome{Status: payment.Failed, ResponseStatus: 402, ResponseBody: []byte("{}\n"), FailureCode: "declined"}
	if ok, err := s.Record(ctx, payment.KindRefund, "s", "refund", 2, withEvent(r, declined, t0), t0); ok || err != nil {
		t.Fatalf("Record of the refund under another fence = %v, %v, want fenced out", ok, err)
	}
	if ok, err := s.Record(ctx, payment.KindRefund, "s", "refund", 1, withEvent(r, declined, t0), t0); !ok || err != nil {
		t.Fatalf("Record of the refund = %v, %v", ok, err)
	}
	if got := eventsOf(t, s, "s", r.ID); !slices.Equal(got, []payment.EventType{payment.EventRefundFailed}) {
		t.Errorf("the refund's events = %v, want one refund.failed", got)
	}

	if err := s.SetOfflineLimits(ctx, "s", &offlineLimits); err != nil {
		t.Fatal(err)
	}
	big := offlineAttempt("s", "big", offlineLimits.MaxAmount+1, "EUR")
	mustClaim(t, s, big)
	if v, err := s.Queue(ctx, "s", "big", 1, withEvent(big, payment.QueuedOutcome(*big), t0), false, t0); v != payment.QueueOverMax || err != nil {
		t.Fatalf("Queue over the max = %s, %v", v, err)
	}
	if got := eventsOf(t, s, "s", big.ID); len(got) != 0 {
		t.Errorf("events of a payment refused by the limits = %v, want none", got)
	}
	q := offlineAttempt("s", "queued", 500, "EUR")
	mustClaim(t, s, q)
	if v, err := s.Queue(ctx, "s", "queued", 1, withEvent(q, payment.QueuedOutcome(*q), t0), false, t0); v != payment.QueueAccepted || err != nil {
		t.Fatalf("Queue = %s, %v", v, err)
	}
	fence, ok, err := s.ClaimForward(ctx, q.ID, 1, t0, t0.Add(time.Minute))
	if !ok || err != nil {
		t.Fatalf("ClaimForward = %v, %v", ok, err)
	}
	expired := payment.Outcome{Status: payment.Expired, FailureCode: "offline_expired"}
	if ok, err := s.Forwarded(ctx, q.ID, fence-1, withEvent(q, expired, t0), t0); ok || err != nil {
		t.Fatalf("Forwarded under an old fence = %v, %v, want refused", ok, err)
	}
	if ok, err := s.Forwarded(ctx, q.ID, fence, withEvent(q, expired, t0), t0); !ok || err != nil {
		t.Fatalf("Forwarded = %v, %v", ok, err)
	}
	if got := eventsOf(t, s, "s", q.ID); !slices.Equal(got, []payment.EventType{payment.EventPaymentQueued, payment.EventPaymentExpired}) {
		t.Errorf("the queued payment's events = %v, want payment.queued, payment.expired", got)
	}
	if got := events(t, s, "other"); len(got) != 0 {
		t.Errorf("another merchant's events = %d, want none", len(got))
	}
}

// A change and its event are committed together or not at all: a change
// whose event cannot be written (here, its id and type are taken) is not
// made, and the writes it shared a transaction with are made all the same.
func testOutboxBothOrNeither(t *testing.T, h Harness) {
	ctx, s := context.Background(), h.Store
	taken := paid(t, s, "first") // recorded without an event
	a := NewAttempt("taken-id", t0, time.Minute)
	mustClaim(t, s, a)
	if ok, err := s.Record(ctx, payment.KindPayment, "s", "taken-id", 1, withEvent(a, payment.SucceededOutcome(*a, payment.Charge{ID: "ch_x"}), t0), t0); !ok || err != nil {
		t.Fatalf("Record = %v, %v", ok, err)
	}
	dup := events(t, s, "s")[0]

	// One change of each kind whose event's id is dup's, each sharing its
	// transaction, on an engine that batches writes, with a good one.
	pay := NewAttempt("pay", t0, time.Minute)
	good := NewAttempt("good", t0, time.Minute)
	refund := refundAttempt("refund", taken, 300)
	if err := s.SetOfflineLimits(ctx, "s", &offlineLimits); err != nil {
		t.Fatal(err)
	}
	queued := offlineAttempt("s", "queued", 500, "EUR")
	forwarded := offlineAttempt("s", "forwarded", 500, "EUR")
	for _, c := range []*payment.Attempt{pay, good, refund, queued, forwarded} {
		mustClaim(t, s, c)
	}
	if v, err := s.Queue(ctx, "s", "forwarded", 1, payment.QueuedOutcome(*forwarded), false, t0); v != payment.QueueAccepted || err != nil {
		t.Fatalf("Queue = %s, %v", v, err)
	}
	fence, ok, err := s.ClaimForward(ctx, forwarded.ID, 1, t0, t0.Add(time.Minute))
	if !ok || err != nil {
		t.Fatalf("ClaimForward = %v, %v", ok, err)
	}
	clash := func(a *payment.Attempt, o payment.Outcome) payment.Outcome {
		o = withEvent(a, o, t0)
		o.Event.ID, o.Event.Type = dup.ID, dup.Type
		return o
	}
	succeeded := payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("{}\n"), ChargeID: "ch"}
	release := h.HoldWrites(t)
	var wg sync.WaitGroup
	try := func(name string, f func() (bool, error)) {
		wg.Go(func() {
			ok, err := f()
			if ok || err == nil {
				t.Errorf("%s with an event that cannot be written = %v, %v, want an error", name, ok, err)
			}
		})
	}
	try("payment", func() (bool, error) {
		return s.Record(ctx, payment.KindPayment, "s", "pay", 1, clash(pay, succeeded), t0)
	})
	try("refund", func() (bool, error) {
		return s.Record(ctx, payment.KindRefund, "s", "refund", 1, clash(refund, succeeded), t0)
	})
	try("queue", func() (bool, error) {
		v, err := s.Queue(ctx, "s", "queued", 1, clash(queued, payment.QueuedOutcome(*queued)), false, t0)
		return v == payment.QueueAccepted && err == nil, err
	})
	try("forwarded", func() (bool, error) {
		return s.Forwarded(ctx, forwarded.ID, fence, clash(forwarded, succeeded), t0)
	})
	var goodOK bool
	var goodErr error
	wg.Go(func() {
		goodOK, goodErr = s.Record(ctx, payment.KindPayment, "s", "good", 1, withEvent(good, succeeded, t0), t0)
	})
	h.WaitBlocked(t, 5)
	release()
	wg.Wait()
	if !goodOK || goodErr != nil {
		t.Errorf("a good record beside them = %v, %v, want recorded", goodOK, goodErr)
	}
	for _, c := range []struct {
		key  string
		want payment.Status
	}{{"pay", payment.InProgress}, {"refund", payment.InProgress}, {"queued", payment.InProgress}, {"forwarded", payment.Queued}, {"good", payment.Succeeded}} {
		if got := mustAttempt(t, s, c.key); got.Status != c.want {
			t.Errorf("attempt %s = %s, want %s", c.key, got.Status, c.want)
		}
	}
	for id, want := range map[string]payment.Status{pay.ID: payment.InProgress, queued.ID: payment.InProgress, forwarded.ID: payment.Queued} {
		if got := mustPayment(t, s, id); got.Status != want {
			t.Errorf("payment %s = %s, want %s", id, got.Status, want)
		}
	}
	if p := mustPayment(t, s, taken); p.AmountReserved != 300 || p.AmountRefunded != 0 {
		t.Errorf("refunded payment: reserved %d, refunded %d, want 300 still reserved", p.AmountReserved, p.AmountRefunded)
	}
	if fs, err := s.Forwards(ctx, 10); err != nil || len(fs) != 1 || fs[0].PaymentID != forwarded.ID {
		t.Errorf("forward queue = %+v, %v, want the forwarded one still in it, the other never queued", fs, err)
	}
	if got := events(t, s, "s"); len(got) != 2 || got[0].ObjectID != good.ID && got[1].ObjectID != good.ID {
		t.Errorf("events = %d, want the first and the good one's", len(got))
	}
	// Written again with an event of its own, each change is made.
	if ok, err := s.Record(ctx, payment.KindPayment, "s", "pay", 1, withEvent(pay, succeeded, t0), t0); !ok || err != nil {
		t.Errorf("Record with a fresh event = %v, %v", ok, err)
	}
}

// A merchant's events are listed newest first, by id, a page at a time in
// either direction, of one type or all; never another merchant's.
func testOutboxList(t *testing.T, h Harness) {
	ctx, s := context.Background(), h.Store
	var ids []string // oldest first
	types := map[string]payment.EventType{}
	for i := range 7 {
		scope, key := "s", fmt.Sprintf("k%d", i)
		a := NewAttempt(key, t0, time.Minute)
		a.Scope = scope
		mustClaim(t, s, a)
		o := payment.SucceededOutcome(*a, payment.Charge{ID: "ch"})
		if i%3 == 1 {
			o = payment.NotCompletedOutcome(*a)
		}
		o = withEvent(a, o, t0.Add(time.Duration(i)*time.Second))
		o.Event.ID = fmt.Sprintf("evt_%02d", i)
		if ok, err := s.Record(ctx, payment.KindPayment, scope, key, 1, o, t0); !ok || err != nil {
			t.Fatalf("Record(%s) = %v, %v", key, ok, err)
		}
		ids, types[o.Event.ID] = append(ids, o.Event.ID), o.Event.Type
	}
	other := NewAttempt("k", t0, time.Minute)
	other.Scope = "other"
	mustClaim(t, s, other)
	o := withEvent(other, payment.SucceededOutcome(*other, payment.Charge{ID: "ch"}), t0)
	o.Event.ID = "evt_99"
	if ok, err := s.Record(ctx, payment.KindPayment, "other", "k", 1, o, t0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	newest := slices.Clone(ids)
	slices.Reverse(newest) // evt_06 ... evt_00
	list := func(f payment.OutboxFilter) []string {
		t.Helper()
		f.Scope = "s"
		es, err := s.OutboxEvents(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range es {
			got = append(got, e.ID)
			var body struct {
				ID   string            `json:"id"`
				Type payment.EventType `json:"type"`
			}
			if err := json.Unmarshal(e.Body, &body); err != nil || body.Type != e.Type || e.Type != types[e.ID] || e.Scope != "s" {
				t.Errorf("event %s: type %s, body %s (%v), want %s of s", e.ID, e.Type, e.Body, err, types[e.ID])
			}
		}
		return got
	}
	for _, c := range []struct {
		f    payment.OutboxFilter
		want []string
	}{
		{payment.OutboxFilter{Limit: 10}, newest},
		{payment.OutboxFilter{Limit: 3}, newest[:4]}, // one past the limit
		{payment.OutboxFilter{Limit: 3, StartingAfter: "evt_04"}, newest[3:7]},
		{payment.OutboxFilter{Limit: 2, StartingAfter: "evt_01"}, newest[6:]},
		{payment.OutboxFilter{Limit: 2, EndingBefore: "evt_02"}, newest[1:4]}, // evt_05 evt_04 evt_03: the extra is the newest
		{payment.OutboxFilter{Limit: 10, EndingBefore: "evt_02"}, newest[:4]},
		{payment.OutboxFilter{Limit: 10, Type: payment.EventPaymentFailed}, []string{"evt_04", "evt_01"}},
		{payment.OutboxFilter{Limit: 1, Type: payment.EventPaymentFailed, StartingAfter: "evt_04"}, []string{"evt_01"}},
		{payment.OutboxFilter{Limit: 10, Type: payment.EventRefundFailed}, nil},
	} {
		if got := list(c.f); !slices.Equal(got, c.want) {
			t.Errorf("OutboxEvents(%+v) = %v, want %v", c.f, got, c.want)
		}
	}
}

// The events told to merchants are purged by their age, in batches, the
// oldest first; younger ones stay.
func testOutboxPurge(t *testing.T, h Harness) {
	ctx, s := context.Background(), h.Store
	var ids []string
	for i := range 3 {
		key := fmt.Sprintf("k%d", i)
		a := NewAttempt(key, t0, time.Minute)
		mustClaim(t, s, a)
		o := withEvent(a, payment.SucceededOutcome(*a, payment.Charge{ID: "ch"}), t0.Add(time.Duration(i)*time.Hour))
		if ok, err := s.Record(ctx, payment.KindPayment, "s", key, 1, o, t0); !ok || err != nil {
			t.Fatal(ok, err)
		}
		ids = append(ids, o.Event.ID)
	}
	before := t0.Add(90 * time.Minute)
	for _, c := range []struct{ limit, want int }{{1, 1}, {10, 1}, {10, 0}} {
		if n, _, err := s.PurgeOutbox(ctx, before, c.limit); n != c.want || err != nil {
			t.Errorf("PurgeOutbox(limit %d) = %d, %v, want %d", c.limit, n, err, c.want)
		}
	}
	if es := events(t, s, "s"); len(es) != 1 || es[0].ID != ids[2] {
		t.Errorf("events after the purge = %v, want the youngest alone", es)
	}
}
