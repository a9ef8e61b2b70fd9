package payment_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/outbound"
	"github.com/oncepay/oncepay/payment"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// endpointServer is a merchant's endpoint: it verifies each delivery with
// the Standard Webhooks reference library (the timestamp aside: the tests
// move their clock) and answers what fail says, or 204.
type endpointServer struct {
	*httptest.Server
	mu       sync.Mutex
	received map[string]int // deliveries by webhook-id
	bodies   map[string]string
	fail     atomic.Int32 // answer this status while not 0
	hang     chan struct{}
	// slow is how long each answer takes; inFlight and maxInFlight count
	// the deliveries being answered at once.
	slow                  atomic.Int64
	inFlight, maxInFlight atomic.Int32
}

func newEndpointServer(t *testing.T, secret func() string) *endpointServer {
	t.Helper()
	s := &endpointServer{received: map[string]int{}, bodies: map[string]string{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.hang != nil {
			<-s.hang
		}
		n := s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		for m := s.maxInFlight.Load(); n > m && !s.maxInFlight.CompareAndSwap(m, n); m = s.maxInFlight.Load() {
		}
		time.Sleep(time.Duration(s.slow.Load()))
		b, _ := io.ReadAll(r.Body)
		wh, err := standardwebhooks.NewWebhook(secret())
		if err != nil || wh.VerifyIgnoringTimestamp(b, r.Header) != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		s.mu.Lock()
		s.received[r.Header.Get("webhook-id")]++
		s.bodies[r.Header.Get("webhook-id")] = string(b)
		s.mu.Unlock()
		if st := s.fail.Load(); st != 0 {
			w.WriteHeader(int(st))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(func() {
		if s.hang != nil {
			close(s.hang)
		}
		s.Close()
	})
	return s
}

func (s *endpointServer) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received[id]
}

// deliveryFixture is a merchant with an endpoint at srv, a deliverer on
// the fixture's clock (set to the real time, as signatures carry it), and
// the events its payments make.
type deliveryFixture struct {
	*fixture
	scope string
	ep    payment.Endpoint
	srv   *endpointServer
	d     *payment.Deliverer
}

func newDeliveryFixture(t *testing.T, d payment.Deliverer) *deliveryFixture {
	t.Helper()
	f := &deliveryFixture{fixture: newFixture(t)}
	f.clock.now = time.Now().UTC()
	f.scope, _, _ = f.Merchant(t, "Shop")
	f.srv = newEndpointServer(t, func() string { return f.ep.Secret })
	ep, err := payment.NewEndpoint(f.scope, f.srv.URL+"/hook", nil, true, f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.DB.CreateEndpoint(context.Background(), ep); err != nil {
		t.Fatal(err)
	}
	f.ep = ep
	if d.Store == nil {
		d.Store = f.DB
	}
	d.Sender, d.Now = outbound.New(outbound.Options{AllowInsecure: true}), f.clock.Now
	if f.d, err = payment.NewDeliverer(d); err != nil {
		t.Fatal(err)
	}
	return f
}

// pay makes a payment of the merchant and returns its event's id.
func (f *deliveryFixture) pay(t *testing.T, key string) string {
	t.Helper()
	if _, err := f.Service.Pay(context.Background(), f.scope, key, visa); err != nil {
		t.Fatal(err)
	}
	es, err := f.DB.OutboxEvents(context.Background(), payment.OutboxFilter{Scope: f.scope, Limit: 1})
	if err != nil || len(es) == 0 {
		t.Fatalf("OutboxEvents = %v, %v", es, err)
	}
	return es[0].ID
}

func (f *deliveryFixture) run(t *testing.T) payment.DeliverResult {
	t.Helper()
	res, err := f.d.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// An event is delivered to the merchant's endpoint, signed, with the
// body GET /v1/events shows, once: a second run finds nothing due.
func TestEventDelivered(t *testing.T) {
	f := newDeliveryFixture(t, payment.Deliverer{})
	id := f.pay(t, "k")
	if res := f.run(t); res != (payment.DeliverResult{Due: 1, Delivered: 1}) {
		t.Errorf("RunOnce = %+v, want 1 delivered", res)
	}
	list, err := f.Service.ListEvents(context.Background(), payment.OutboxFilter{Scope: f.scope, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if f.srv.count(id) != 1 || f.srv.bodies[id] != string(list.Data[0]) {
		t.Errorf("the endpoint got %s %d times: %s; want once: %s", id, f.srv.count(id), f.srv.bodies[id], list.Data[0])
	}
	if res := f.run(t); res.Due != 0 {
		t.Errorf("second RunOnce = %+v, want nothing due", res)
	}
	ds, _ := f.DB.Deliveries(context.Background(), f.ep.ID, 10)
	if len(ds) != 1 || ds[0].State != payment.DeliveryDelivered || ds[0].LastStatus != 204 || ds[0].Tries != 1 {
		t.Errorf("deliveries = %+v, want one delivered on its first try", ds)
	}
}

// A delivery not answered 2xx is tried again on the schedule, not before,
// and fails for good past its end; each try is the same event, same id.
func TestDeliveryRetriedOnSchedule(t *testing.T) {
	f := newDeliveryFixture(t, payment.Deliverer{Schedule: []time.Duration{time.Minute, 10 * time.Minute}, DisableAfter: 24 * time.Hour})
	f.srv.fail.Store(500)
	id := f.pay(t, "k")
	for i, step := range []struct {
		wait time.Duration
		want payment.DeliverResult
	}{
		{0, payment.DeliverResult{Due: 1, Retried: 1}},
		{50 * time.Second, payment.DeliverResult{}}, // within the first wait, jitter and all
		{20 * time.Second, payment.DeliverResult{Due: 1, Retried: 1}},
		{8 * time.Minute, payment.DeliverResult{}},
		{4 * time.Minute, payment.DeliverResult{Due: 1, GaveUp: 1}},
		{time.Hour, payment.DeliverResult{}},
	} {
		f.clock.Add(step.wait)
		if res := f.run(t); res != step.want {
			t.Errorf("run %d (+%s) = %+v, want %+v", i, step.wait, res, step.want)
		}
	}
	if got := f.srv.count(id); got != 3 {
		t.Errorf("tries received = %d, want 3, all of %s", got, id)
	}
	ds, _ := f.DB.Deliveries(context.Background(), f.ep.ID, 10)
	if len(ds) != 1 || ds[0].State != payment.DeliveryFailed || ds[0].Tries != 3 || ds[0].LastStatus != 500 {
		t.Errorf("deliveries = %+v, want one failed after 3 tries, 500", ds)
	}
}

// An endpoint that fails for DisableAfter with no success is disabled, and
// its deliveries still pending fail with it; one success in between starts
// the count again.
func TestEndpointDisabledAfterFailingTooLong(t *testing.T) {
	f := newDeliveryFixture(t, payment.Deliverer{Schedule: []time.Duration{time.Minute, time.Minute, time.Minute, time.Minute, time.Minute},
		DisableAfter: 3 * time.Minute})
	f.srv.fail.Store(503)
	f.pay(t, "a")
	f.run(t) // failing since now
	f.clock.Add(2 * time.Minute)
	f.srv.fail.Store(0)
	f.pay(t, "b")
	if res := f.run(t); res.Delivered != 2 {
		t.Fatalf("run with the endpoint back = %+v, want both delivered", res)
	}
	f.srv.fail.Store(503)
	f.pay(t, "c")
	f.pay(t, "d")
	for i := 0; i < 6; i++ {
		f.run(t)
		f.clock.Add(70 * time.Second)
	}
	es, _ := f.DB.Endpoints(context.Background(), f.scope)
	if es[0].Enabled() || es[0].DisabledReason == "" {
		t.Fatalf("endpoint = %+v, want disabled with its reason", es[0])
	}
	ds, _ := f.DB.Deliveries(context.Background(), f.ep.ID, 10)
	for _, d := range ds {
		if d.State == payment.DeliveryPending {
			t.Errorf("delivery %s still pending on a disabled endpoint", d.EventID)
		}
	}
	if b, _ := f.DB.DeliveryBacklog(context.Background()); b.Pending != 0 {
		t.Errorf("backlog = %+v, want none", b)
	}
	f.pay(t, "e")
	if res := f.run(t); res.Due != 0 {
		t.Errorf("run after the endpoint was disabled = %+v, want nothing due", res)
	}
}

// lostFinish is a store that loses every FinishDelivery: a deliverer that
// died after its try reached the endpoint and before it stored so.
type lostFinish struct{ payment.Database }

func (lostFinish) FinishDelivery(context.Context, string, string, int64, payment.DeliveryEnd, time.Time) (bool, time.Time, error) {
	return false, time.Time{}, errors.New("the process died")
}

// At least once: a try whose end was never stored is made again once its
// lease runs out, with the same webhook-id, which the merchant dedupes by;
// not before.
func TestDeliveryAtLeastOnce(t *testing.T) {
	f := newDeliveryFixture(t, payment.Deliverer{})
	id := f.pay(t, "k")
	dying, err := payment.NewDeliverer(payment.Deliverer{Store: lostFinish{f.DB}, Sender: outbound.New(outbound.Options{AllowInsecure: true}), Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dying.RunOnce(context.Background()); err == nil {
		t.Fatal("RunOnce with its end lost: no error")
	}
	if res := f.run(t); res.Due != 0 {
		t.Errorf("run within the lease = %+v, want nothing due", res)
	}
	f.clock.Add(f.d.Lease)
	if res := f.run(t); res.Delivered != 1 {
		t.Errorf("run once the lease ran out = %+v, want it delivered", res)
	}
	if got := f.srv.count(id); got != 2 {
		t.Errorf("the endpoint got %s %d times, want 2: at least once, same id", id, got)
	}
}

// Deliverers racing over one store (two instances) send each event once:
// the claim decides; one endpoint that hangs holds up none of the others'
// deliveries past its try's timeout.
func TestDeliverersRaceAndSlowEndpoints(t *testing.T) {
	f := newDeliveryFixture(t, payment.Deliverer{})
	var ids []string
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		ids = append(ids, f.pay(t, k))
	}
	other, err := payment.NewDeliverer(payment.Deliverer{Store: f.DB, Sender: outbound.New(outbound.Options{AllowInsecure: true}), Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var delivered atomic.Int32
	for _, d := range []*payment.Deliverer{f.d, other, f.d, other} {
		wg.Go(func() {
			res, err := d.RunOnce(context.Background())
			if err != nil {
				t.Error(err)
			}
			delivered.Add(int32(res.Delivered))
		})
	}
	wg.Wait()
	for _, id := range ids {
		if got := f.srv.count(id); got != 1 {
			t.Errorf("%s delivered %d times, want once", id, got)
		}
	}
	if got := delivered.Load(); got != int32(len(ids)) {
		t.Errorf("delivered = %d, want %d", got, len(ids))
	}

	slow := newDeliveryFixture(t, payment.Deliverer{Timeout: 200 * time.Millisecond})
	slow.srv.hang = make(chan struct{})
	slow.pay(t, "slow")
	start := time.Now()
	if res := slow.run(t); res.Retried != 1 {
		t.Errorf("run against a hanging endpoint = %+v, want it tried again later", res)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the run took %s, want the try's timeout", d)
	}
}

// pausedAfterDeliveryClaim is a deliverer's process paused (a GC pause, a
// stopped VM) between its claim and its send, for longer than its lease.
type pausedAfterDeliveryClaim struct {
	payment.Database
	clock *clock
	lease time.Duration
}

func (p pausedAfterDeliveryClaim) ClaimDelivery(ctx context.Context, eventID, endpointID string, fence int64, now, until time.Time) (int64, bool, error) {
	f, ok, err := p.Database.ClaimDelivery(ctx, eventID, endpointID, fence, now, until)
	p.clock.Add(p.lease + time.Second)
	return f, ok, err
}

// A deliverer whose lease ran out between its claim and its send sends
// nothing: another deliverer may hold the delivery by then and be making
// the same try. The next run delivers it, once.
func TestDelivererPastItsLeaseDoesNotSend(t *testing.T) {
	f := newDeliveryFixture(t, payment.Deliverer{})
	id := f.pay(t, "k")
	paused, err := payment.NewDeliverer(payment.Deliverer{Store: pausedAfterDeliveryClaim{f.DB, f.clock, f.d.Lease},
		Sender: outbound.New(outbound.Options{AllowInsecure: true}), Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := paused.RunOnce(context.Background()); err != nil || res.Skipped != 1 {
		t.Errorf("the paused deliverer's run = %+v, %v; want it skipped", res, err)
	}
	if got := f.srv.count(id); got != 0 {
		t.Fatalf("the endpoint got %s %d times from a deliverer past its lease, want 0", id, got)
	}
	if res := f.run(t); res.Delivered != 1 {
		t.Errorf("the next run = %+v, want it delivered", res)
	}
	if got := f.srv.count(id); got != 1 {
		t.Errorf("the endpoint got %s %d times, want 1", id, got)
	}
}

// An operator sends a delivery again: one failed for good goes out at
// once, with its one webhook-id and body, and is delivered; one delivered
// is sent again on request; one that fails again is tried on the schedule
// from its start. Raced by a run, it is sent once: the claim decides. A
// delivery a deliverer holds, to a disabled endpoint, or unknown, is
// refused and not sent.
func TestRedeliver(t *testing.T) {
	f := newDeliveryFixture(t, payment.Deliverer{Schedule: []time.Duration{time.Minute}})
	ctx := context.Background()
	f.srv.fail.Store(500)
	id := f.pay(t, "k")
	f.run(t)
	f.clock.Add(2 * time.Minute)
	if res := f.run(t); res.GaveUp != 1 {
		t.Fatalf("second run = %+v, want it failed for good", res)
	}
	f.srv.fail.Store(0)
	for i, want := range []payment.DeliverResult{{Due: 1, Delivered: 1}, {Due: 1, Delivered: 1}} { // failed, then delivered
		if res, err := f.d.Redeliver(ctx, id, f.ep.ID); res != want || err != nil {
			t.Fatalf("Redeliver %d = %+v, %v, want %+v", i, res, err, want)
		}
		if got := f.srv.count(id); got != 3+i {
			t.Errorf("copies the endpoint got = %d, want %d", got, 3+i)
		}
	}
	ds, _ := f.DB.Deliveries(ctx, f.ep.ID, 10)
	if len(ds) != 1 || ds[0].State != payment.DeliveryDelivered || ds[0].Tries != 1 || ds[0].LastStatus != 204 {
		t.Errorf("deliveries = %+v, want it delivered on the redelivery's one try", ds)
	}

	f.srv.fail.Store(503)
	if res, err := f.d.Redeliver(ctx, id, f.ep.ID); res.Retried != 1 || err != nil {
		t.Fatalf("Redeliver to a failing endpoint = %+v, %v, want it tried again later", res, err)
	}
	if res := f.run(t); res.Due != 0 {
		t.Errorf("run at once = %+v, want nothing due before the schedule's first wait", res)
	}
	// Raced by runs, a redelivery is never sent while a run sends it: each
	// copy is a claim's, one at a time.
	f.srv.slow.Store(int64(20 * time.Millisecond))
	for i := range 10 {
		f.clock.Add(2 * time.Minute)
		before := f.srv.count(id)
		var wg sync.WaitGroup
		var sent atomic.Int32
		wg.Go(func() {
			res, err := f.d.Redeliver(ctx, id, f.ep.ID)
			if err != nil && payment.ErrorCode(err) != payment.EINPROGRESS {
				t.Error(err)
			}
			sent.Add(int32(res.Delivered + res.Retried + res.GaveUp))
		})
		wg.Go(func() {
			res := f.run(t)
			sent.Add(int32(res.Delivered + res.Retried + res.GaveUp))
		})
		wg.Wait()
		if got := f.srv.count(id) - before; got != int(sent.Load()) || got < 1 {
			t.Fatalf("race %d: the endpoint got %d copies, the deliverer sent %d; want as many, at least 1", i, got, sent.Load())
		}
	}
	if got := f.srv.maxInFlight.Load(); got != 1 {
		t.Errorf("copies in flight at once = %d, want 1", got)
	}
	f.srv.slow.Store(0)

	// A deliverer holds it: refused, not sent.
	f.clock.Add(2 * time.Minute)
	ds, _ = f.DB.Deliveries(ctx, f.ep.ID, 10)
	if _, ok, err := f.DB.ClaimDelivery(ctx, id, f.ep.ID, ds[0].Fence, f.clock.Now(), f.clock.Now().Add(time.Minute)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	before := f.srv.count(id)
	if _, err := f.d.Redeliver(ctx, id, f.ep.ID); payment.ErrorCode(err) != payment.EINPROGRESS {
		t.Errorf("Redeliver of one held = %v, want in progress", err)
	}
	for _, k := range [][2]string{{"evt_nope", f.ep.ID}, {id, "we_nope"}} {
		if _, err := f.d.Redeliver(ctx, k[0], k[1]); payment.ErrorCode(err) != payment.ENOTFOUND {
			t.Errorf("Redeliver(%s, %s) = %v, want not found", k[0], k[1], err)
		}
	}
	if err := f.DB.DisableEndpoint(ctx, f.ep.ID, "gone", f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(time.Hour)
	if _, err := f.d.Redeliver(ctx, id, f.ep.ID); payment.ErrorCode(err) != payment.EINVALID {
		t.Errorf("Redeliver to a disabled endpoint = %v, want invalid", err)
	}
	if got := f.srv.count(id); got != before {
		t.Errorf("refused redeliveries sent %d copies", got-before)
	}
}

// A run goes on while its batches come back full: a backlog of more than
// Limit is delivered in one run, each event once, and Observe hears of
// each batch.
func TestRunDrainsTheBacklogInBatches(t *testing.T) {
	var batches []payment.DeliverResult
	f := newDeliveryFixture(t, payment.Deliverer{Limit: 3, Observe: func(r payment.DeliverResult) { batches = append(batches, r) }})
	var ids []string
	for i := range 7 {
		ids = append(ids, f.pay(t, fmt.Sprint("k", i)))
	}
	if res := f.run(t); res != (payment.DeliverResult{Due: 7, Delivered: 7}) {
		t.Errorf("RunOnce = %+v, want all 7 delivered in one run", res)
	}
	for _, id := range ids {
		if got := f.srv.count(id); got != 1 {
			t.Errorf("%s delivered %d times, want once", id, got)
		}
	}
	want := []payment.DeliverResult{{Due: 3, Delivered: 3}, {Due: 3, Delivered: 3}, {Due: 1, Delivered: 1}}
	if !slices.Equal(batches, want) {
		t.Errorf("batches observed = %+v, want %+v", batches, want)
	}
}
