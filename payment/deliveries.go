package payment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/oncepay/oncepay/internal/crashpoint"
)

// Sender makes one try of a delivery.
type Sender interface {
	// Send posts body, the event eventID's, to ep, signed with ep's secrets
	// at at. It returns the HTTP status the endpoint answered, 0 if none
	// came, and an error unless it was a 2xx: refused before it was sent,
	// no answer within ctx, another status.
	Send(ctx context.Context, ep Endpoint, eventID string, body []byte, at time.Time) (status int, err error)
}

// DefaultDeliverySchedule is how long a failed delivery waits before each
// try again: 11 tries over about three days, as Stripe's.
var DefaultDeliverySchedule = []time.Duration{
	time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour,
	10 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour, 18 * time.Hour,
}

// Defaults of a Deliverer.
const (
	DefaultDeliveryTimeout  = 10 * time.Second
	DefaultDisableAfter     = 72 * time.Hour
	DefaultDeliveryLimit    = 500
	DefaultDeliveryParallel = 32
)

// Deliverer sends merchants their events, at least once: each delivery is
// claimed with a lease and a fence for each try, as a queued payment is
// claimed for forwarding, so deliverers on any number of instances never
// try one at once, and a try a crash cut short is made again once its
// lease ends (with the same webhook-id: the merchant dedupes by it). A
// delivery not answered 2xx is tried again on Schedule; an endpoint that
// fails for DisableAfter with no success is disabled. Build it with
// NewDeliverer.
type Deliverer struct {
	Store  EndpointStore
	Sender Sender
	Now    func() time.Time
	Log    *slog.Logger
	// Timeout bounds one try (default 10s); Lease, longer, how long a
	// deliverer holds a delivery it claimed (default three timeouts).
	Timeout, Lease time.Duration
	// Schedule is the wait before each try again; past its end a delivery
	// has failed for good.
	Schedule []time.Duration
	// DisableAfter is how long an endpoint may fail, with no success,
	// before it is disabled.
	DisableAfter time.Duration
	// Limit caps the deliveries one batch of a run takes; Parallel how
	// many are in flight at once, so one slow endpoint does not hold up the
	// others.
	Limit, Parallel int
	// Observe, if set, is told what every batch of a run, and every
	// Redeliver, did.
	Observe func(DeliverResult)
}

// NewDeliverer returns d with its defaults set and checked.
func NewDeliverer(d Deliverer) (*Deliverer, error) {
	switch {
	case d.Store == nil || d.Sender == nil:
		return nil, errors.New("payment: deliverer: no Store or Sender")
	case d.Timeout < 0 || d.Lease < 0 || d.DisableAfter < 0 || d.Limit < 0 || d.Parallel < 0:
		return nil, errors.New("payment: deliverer: a negative setting")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	d.Timeout = cmp.Or(d.Timeout, DefaultDeliveryTimeout)
	// A try's send, then the write of how it ended: three timeouts leave
	// the write two. A lease that runs out first costs a second delivery,
	// never a lost one (the late end is fenced out).
	d.Lease = cmp.Or(d.Lease, 3*d.Timeout)
	if d.Lease <= d.Timeout {
		return nil, fmt.Errorf("payment: deliverer: the lease (%s) must exceed a try's timeout (%s)", d.Lease, d.Timeout)
	}
	if d.Schedule == nil {
		d.Schedule = DefaultDeliverySchedule
	}
	d.DisableAfter = cmp.Or(d.DisableAfter, DefaultDisableAfter)
	d.Limit = cmp.Or(d.Limit, DefaultDeliveryLimit)
	d.Parallel = cmp.Or(d.Parallel, DefaultDeliveryParallel)
	return &d, nil
}

// DeliverResult is what one run did.
type DeliverResult struct {
	Due       int // deliveries found due
	Delivered int // answered 2xx
	Retried   int // failed, tried again later
	GaveUp    int // failed the last try of the schedule
	Skipped   int // another deliverer held or finished it first
	Disabled  int // endpoints disabled for failing too long
}

func (r DeliverResult) String() string {
	return fmt.Sprintf("deliver: %d due, %d delivered, %d to try again, %d failed for good, %d skipped, %d endpoints disabled",
		r.Due, r.Delivered, r.Retried, r.GaveUp, r.Skipped, r.Disabled)
}

// RunOnce makes a try of every delivery due now, Parallel at a time, in
// batches of Limit. While a batch comes back full more may be due, and the
// run goes on (as the purge does), so a backlog drains as fast as
// deliveries are made, not Limit per tick of the schedule. Observe is told
// of each batch.
func (d *Deliverer) RunOnce(ctx context.Context) (res DeliverResult, err error) {
	if d.Limit < 1 || d.Parallel < 1 || d.Timeout <= 0 {
		return res, errors.New("payment: deliverer: Limit, Parallel or Timeout is not set; build it with NewDeliverer")
	}
	for {
		b, err := d.batch(ctx)
		res.Due += b.Due
		res.add(b)
		if d.Observe != nil {
			d.Observe(b)
		}
		if err != nil || b.Due < d.Limit || ctx.Err() != nil {
			return res, err
		}
	}
}

// batch tries up to Limit deliveries due now, Parallel at a time.
func (d *Deliverer) batch(ctx context.Context) (res DeliverResult, err error) {
	due, err := d.Store.DueDeliveries(ctx, d.Now(), d.Limit)
	if err != nil {
		return res, err
	}
	res.Due = len(due)
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
		next = make(chan DueDelivery)
	)
	for range min(d.Parallel, len(due)) {
		wg.Go(func() {
			for dd := range next {
				r, err := d.deliver(ctx, dd)
				mu.Lock()
				res.add(r)
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	for _, dd := range due {
		next <- dd
	}
	close(next)
	wg.Wait()
	return res, errors.Join(errs...)
}

func (r *DeliverResult) add(o DeliverResult) {
	r.Delivered += o.Delivered
	r.Retried += o.Retried
	r.GaveUp += o.GaveUp
	r.Skipped += o.Skipped
	r.Disabled += o.Disabled
}

// deliver claims one delivery, makes its try and stores how it ended.
func (d *Deliverer) deliver(ctx context.Context, dd DueDelivery) (res DeliverResult, err error) {
	now := d.Now()
	leaseUntil := now.Add(d.Lease)
	fence, ok, err := d.Store.ClaimDelivery(ctx, dd.EventID, dd.EndpointID, dd.Fence, now, leaseUntil)
	if err != nil || !ok {
		res.Skipped = 1
		return res, err
	}
	crashpoint.Hit("after-delivery-claim")
	// The try ends with the lease, as a forwarder's provider call does: a
	// deliverer paused past its lease sends nothing, since another may hold
	// the delivery by now and be sending the same try.
	budget := min(d.Timeout, leaseUntil.Sub(d.Now()))
	if budget <= 0 {
		res.Skipped = 1
		return res, nil
	}
	sctx, cancel := context.WithTimeout(ctx, budget)
	status, sendErr := d.Sender.Send(sctx, dd.Endpoint, dd.EventID, dd.Body, d.Now())
	cancel()
	crashpoint.Hit("after-delivery-send") // sent, how it ended not yet stored: sent again
	end := DeliveryEnd{State: DeliveryDelivered, Status: status}
	tries := dd.Tries + 1
	switch {
	case sendErr == nil:
		res.Delivered = 1
	case tries > len(d.Schedule):
		end.State, end.LastError, res.GaveUp = DeliveryFailed, TruncateError(sendErr.Error()), 1
	default:
		end.State, end.LastError, res.Retried = DeliveryPending, TruncateError(sendErr.Error()), 1
		end.NextAt = d.Now().Add(jitter(d.Schedule[tries-1]))
	}
	ok, failingSince, err := d.Store.FinishDelivery(ctx, dd.EventID, dd.EndpointID, fence, end, d.Now())
	if err != nil || !ok { // the lease ran out and another deliverer took it
		return DeliverResult{Skipped: 1}, err
	}
	if sendErr == nil {
		d.Log.Debug("delivery: delivered", "event_id", dd.EventID, "endpoint_id", dd.EndpointID, "status", status, "tries", tries)
		return res, nil
	}
	d.Log.Warn("delivery: failed", "event_id", dd.EventID, "endpoint_id", dd.EndpointID, "tries", tries,
		"status", status, "err", sendErr, "next", end.NextAt, "failing_since", failingSince)
	if !failingSince.IsZero() && !d.Now().Before(failingSince.Add(d.DisableAfter)) {
		reason := fmt.Sprintf("every delivery failed since %s; the last: %s", failingSince.UTC().Format(time.RFC3339), end.LastError)
		err := d.Store.DisableEndpoint(ctx, dd.EndpointID, TruncateError(reason), d.Now())
		switch {
		case ErrorCode(err) == ENOTFOUND: // disabled already, by another deliverer or an operator
		case err != nil:
			return res, err
		default:
			res.Disabled = 1
			d.Log.Error("endpoint disabled: its deliveries failed for too long", "endpoint_id", dd.EndpointID, "url", dd.Endpoint.URL,
				"failing_since", failingSince, "err", sendErr)
		}
	}
	return res, nil
}

// Redeliver sends the event eventID to the endpoint endpointID again now,
// as an operator asks: a delivery failed for good, or one delivered that
// the merchant wants again. The store starts the delivery over (due now,
// untried, under a new fence) and this deliverer tries it as a run does,
// claimed with a lease and fenced, so a run racing it does not send it
// too. A try that fails is tried again on the Schedule, from its start.
// Skipped in the result: a run claimed it first, and is sending it.
func (d *Deliverer) Redeliver(ctx context.Context, eventID, endpointID string) (res DeliverResult, err error) {
	if d.Timeout <= 0 {
		return res, errors.New("payment: deliverer: Timeout is not set; build it with NewDeliverer")
	}
	dd, err := d.Store.RedeliverDelivery(ctx, eventID, endpointID, d.Now())
	if err != nil {
		return res, err
	}
	res, err = d.deliver(ctx, dd)
	res.Due = 1
	if d.Observe != nil {
		d.Observe(res)
	}
	d.Log.Info("delivery: sent again", "event_id", eventID, "endpoint_id", endpointID, "result", res.String(), "err", err)
	return res, err
}

// jitter spreads a wait by up to a tenth either way, so that the
// deliveries that failed together do not all come back together.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()-0.5)*0.2*float64(d))
}
