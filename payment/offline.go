package payment

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/crashpoint"
)

// Statuses of a payment taken while the provider could not be reached.
const (
	// Queued: accepted within the merchant's offline limits, answered 202,
	// waiting in the forward queue for the link to come back.
	Queued Status = "queued"
	// Expired: queued past the merchant's max age with nothing found at the
	// provider; final, never charged after.
	Expired Status = "expired"
)

// ErrLinkDown is the answer of a provider call that was not made: the link
// to the provider is down (the circuit breaker is open). Nothing reached
// the provider, so nothing can have been charged.
var ErrLinkDown = errors.New("the link to the payment provider is down; the call was not made")

// OfflineLimits are a merchant's limits for payments taken while the
// provider cannot be reached. Each applies to each currency alone, in minor
// units: the risk a merchant takes is a sum of money in one currency.
type OfflineLimits struct {
	MaxAmount int64         // one payment
	MaxTotal  int64         // every payment still queued in the currency, this one included
	MaxAge    time.Duration // how long a payment may wait; past it, it expires
}

// Validate checks l against the provider's idempotency window: a payment
// forwarded after the provider forgot its key could be charged twice.
func (l OfflineLimits) Validate(window time.Duration) error {
	switch {
	case l.MaxAmount <= 0 || l.MaxAmount > MaxAmount:
		return fmt.Errorf("--max-amount %d: must be 1 to %d minor units", l.MaxAmount, MaxAmount)
	case l.MaxTotal < l.MaxAmount:
		return fmt.Errorf("--max-total %d is below --max-amount %d", l.MaxTotal, l.MaxAmount)
	case l.MaxAge <= 0:
		return fmt.Errorf("--max-age %s must be positive", l.MaxAge)
	case l.MaxAge > window:
		return fmt.Errorf("--max-age %s exceeds the provider's idempotency window of %s: a payment forwarded after the provider forgot its key could be charged twice", l.MaxAge, window)
	}
	return nil
}

// ProviderKeyWindow is how long the providers oncepay speaks to keep an
// idempotency key: Stripe's 24 hours, which the simulated provider is held
// to as well, so that what works in a demo works in production.
const ProviderKeyWindow = 24 * time.Hour

// QueueVerdict is what Store.Queue did with a payment.
type QueueVerdict string

const (
	QueueAccepted  QueueVerdict = "queued"
	QueueOff       QueueVerdict = "offline_off"   // the merchant takes no payments offline
	QueueOverMax   QueueVerdict = "over_amount"   // the payment exceeds the merchant's max amount
	QueueOverTotal QueueVerdict = "over_total"    // the currency's queued total would exceed max total
	QueueFenced    QueueVerdict = "fenced_out"    // another owner holds the attempt now
	QueueExpired   QueueVerdict = "already_stale" // past max age before it was queued
)

// OfflineVerdict is the offline limits' decision on a payment of amount
// when queued is already queued in its currency; stale: it is past its max
// age already.
func OfflineVerdict(amount, queued, maxAmount, maxTotal int64, stale bool) QueueVerdict {
	switch {
	case amount > maxAmount:
		return QueueOverMax
	case queued+amount > maxTotal:
		return QueueOverTotal
	case stale:
		return QueueExpired
	}
	return QueueAccepted
}

// TruncateError keeps a provider's error short enough for the admin page.
func TruncateError(s string) string {
	if len(s) > 500 {
		return strings.ToValidUTF8(s[:500], "")
	}
	return s
}

// Forward is a payment waiting in the forward queue: a job whose unique key
// is the payment, claimed for forwarding with a lease and a fence, as an
// attempt is claimed by its owner.
type Forward struct {
	PaymentID      string
	Scope          string
	Key            string
	Amount         int64
	Currency       string
	Fence          int64     // bumped by every claim; guards the settlement
	LeaseExpiresAt time.Time // zero when no forwarder holds it
	Tries          int       // forward claims begun
	// Reached is true once a call may have reached the provider: the first
	// call's answer was lost, or a forwarder claimed it. Every later try asks
	// the provider by key first.
	Reached   bool
	LastError string
	QueuedAt  time.Time
	ExpiresAt time.Time // QueuedAt's payment's creation plus the merchant's max age
}

// QueueTotal is one currency's line of the forward queue, for operators.
type QueueTotal struct {
	Currency string
	Count    int
	Amount   int64
	Oldest   time.Time
}

// QueueStore keeps merchants' offline limits and the forward queue.
type QueueStore interface {
	// SetOfflineLimits sets scope's limits; nil turns offline payments off.
	SetOfflineLimits(ctx context.Context, scope string, l *OfflineLimits) error
	// OfflineLimits returns scope's limits, nil when offline payments are off.
	OfflineLimits(ctx context.Context, scope string) (*OfflineLimits, error)
	// AllOfflineLimits returns every scope's limits.
	AllOfflineLimits(ctx context.Context) (map[string]OfflineLimits, error)
	// Queue records o (the 202 of a queued payment) on the attempt (scope,
	// key) if it is still in progress under fence, and puts its payment in
	// the forward queue, in one transaction, if it fits scope's limits at
	// now: its amount, and its currency's total still queued. reached says
	// whether the call that failed may have reached the provider. o.Event is
	// written with them, and only if the payment is queued.
	Queue(ctx context.Context, scope, key string, fence int64, o Outcome, reached bool, now time.Time) (QueueVerdict, error)
	// DueForwards returns up to limit queued payments with no live lease at
	// now, oldest first.
	DueForwards(ctx context.Context, now time.Time, limit int) ([]Forward, error)
	// ClaimForward gives a queued payment to a forwarder if it is still
	// queued under fence with no live lease at now: fence+1, a lease until
	// leaseUntil, one more try, and Reached set (the forwarder may call).
	ClaimForward(ctx context.Context, paymentID string, fence int64, now, leaseUntil time.Time) (newFence int64, ok bool, err error)
	// ReleaseForward drops the forwarder's lease and notes why its try did
	// not settle the payment. It does nothing if fence no longer holds it.
	ReleaseForward(ctx context.Context, paymentID string, fence int64, lastErr string, now time.Time) error
	// Forwarded settles a queued payment under fence: it leaves the queue,
	// and its attempt and payment take o's status, charge and failure code
	// (the attempt keeps its 202, which every replay gets), and o.Event is
	// written, in one transaction. ok is false when fenced out.
	Forwarded(ctx context.Context, paymentID string, fence int64, o Outcome, now time.Time) (ok bool, err error)
	// QueueTotals returns the forward queue's count, amount and oldest
	// payment per currency, across merchants.
	QueueTotals(ctx context.Context) ([]QueueTotal, error)
	// Forwards returns up to limit queued payments, oldest first, for the
	// admin page.
	Forwards(ctx context.Context, limit int) ([]Forward, error)
}

// QueuedOutcome is what an owner records when the provider could not be
// reached and the merchant's limits let the payment wait: 202 and the
// payment in status queued, replayed byte for byte like every answer.
func QueuedOutcome(a Attempt) Outcome {
	a.Status = Queued
	body := a.View().Body()
	return Outcome{Status: Queued, ResponseStatus: 202, ResponseBody: body, view: body}
}

// expiredOutcome is what the forwarder records for a payment that waited
// past its max age and that the provider never charged.
func expiredOutcome() Outcome {
	return Outcome{Status: Expired, FailureCode: "offline_expired"}
}

// queue answers a payment whose provider could not be reached, if its
// merchant takes payments offline and it fits the limits: 202 queued, stored
// as its final answer. ok is false for every other case, which keeps
// today's answer (503, the attempt released for the retry).
func (s *Service) queue(ctx context.Context, a Attempt, reached bool) (res Result, ok bool) {
	lim, err := s.Store.OfflineLimits(ctx, a.Scope)
	if err != nil {
		s.Log.Error("offline limits", "id", a.ID, "err", err)
		return Result{}, false
	}
	if lim == nil {
		return Result{}, false
	}
	o := s.withEvent(a, QueuedOutcome(a))
	verdict, err := s.Store.Queue(ctx, a.Scope, a.Key, a.Fence, o, reached, s.Now())
	if err != nil {
		s.Log.Error("queue payment", "id", a.ID, "err", err)
		return Result{}, false
	}
	if s.ObserveQueue != nil {
		s.ObserveQueue(verdict, a.Currency, a.Amount)
	}
	if verdict != QueueAccepted {
		s.Log.Warn("payment not queued", "id", a.ID, "verdict", verdict)
		return Result{}, false
	}
	s.Log.Info("payment queued: the provider cannot be reached", "id", a.ID, "reached", reached)
	return Result{Status: o.ResponseStatus, Body: o.ResponseBody}, true
}

// Forwarder sends the forward queue's payments to the provider once the
// link is back, oldest first, each under its own downstream key, so that a
// payment forwarded late, twice or after a crash is charged once. Build it
// with NewForwarder.
type Forwarder struct {
	Service *Service
	// Limit caps the payments one run takes; the next run takes the rest.
	Limit int
	// Observe, if set, is told what every run did.
	Observe func(ForwardResult)
}

// DefaultForwardLimit is how many queued payments one forward run takes.
const DefaultForwardLimit = 1000

// NewForwarder returns f with its defaults set and checked.
func NewForwarder(f Forwarder) (*Forwarder, error) {
	if f.Service == nil {
		return nil, errors.New("payment: forwarder: no Service")
	}
	if f.Limit < 0 {
		return nil, fmt.Errorf("payment: forwarder: Limit %d is negative", f.Limit)
	}
	if f.Limit == 0 {
		f.Limit = DefaultForwardLimit
	}
	return &f, nil
}

// ForwardResult is what one forward run did.
type ForwardResult struct {
	Checked   int // queued payments found due
	Succeeded int // charged (or found charged)
	Declined  int // refused by the provider: the merchant's offline risk
	Expired   int // past the max age, never charged
	Unknown   int // the provider could not be reached or could not say: left queued
	Skipped   int // another forwarder held or settled it first
}

func (r ForwardResult) String() string {
	return fmt.Sprintf("forward: %d due, %d succeeded, %d declined, %d expired, %d left queued, %d skipped",
		r.Checked, r.Succeeded, r.Declined, r.Expired, r.Unknown, r.Skipped)
}

// RunOnce forwards the queued payments due now. A run that finds the link
// down stops there: the rest wait for the next run, not for a timeout each.
func (f *Forwarder) RunOnce(ctx context.Context) (res ForwardResult, err error) {
	if f.Limit < 1 {
		return res, errors.New("payment: forwarder: Limit is not set; build it with NewForwarder")
	}
	defer func() {
		if f.Observe != nil {
			f.Observe(res)
		}
	}()
	due, err := f.Service.Store.DueForwards(ctx, f.Service.Now(), f.Limit)
	if err != nil {
		return res, err
	}
	for _, q := range due {
		res.Checked++
		st, err := f.forward(ctx, q)
		if err != nil {
			return res, err
		}
		switch st {
		case Succeeded:
			res.Succeeded++
		case Failed:
			res.Declined++
		case Expired:
			res.Expired++
		case Queued:
			res.Unknown++
			if f.Service.LinkDown != nil && f.Service.LinkDown() {
				return res, nil
			}
		default:
			res.Skipped++
		}
	}
	return res, nil
}

// forward claims one queued payment and settles it if the provider can say
// how: "" if another forwarder has it, Queued if it is left for later.
func (f *Forwarder) forward(ctx context.Context, q Forward) (Status, error) {
	s := f.Service
	now := s.Now()
	fence, ok, err := s.Store.ClaimForward(ctx, q.PaymentID, q.Fence, now, now.Add(s.Lease))
	if err != nil || !ok {
		return "", err
	}
	crashpoint.Hit("after-forward-claim")
	a, err := s.Store.AttemptByID(ctx, q.Scope, q.PaymentID)
	if err != nil {
		return "", err
	}
	o, err := f.outcome(ctx, *a, q, now, now.Add(s.Lease))
	if err != nil {
		s.Log.Warn("forward: left queued", "id", q.PaymentID, "err", err)
		return Queued, s.Store.ReleaseForward(ctx, q.PaymentID, fence, err.Error(), s.Now())
	}
	if o.Status == Succeeded {
		crashpoint.Hit("after-forward-charge")
	}
	ok, err = s.Store.Forwarded(ctx, q.PaymentID, fence, s.withEvent(*a, o), s.Now())
	if err != nil || !ok {
		return "", err
	}
	s.Log.Info("forward: settled", "id", q.PaymentID, "status", o.Status, "provider_id", o.ChargeID)
	return o.Status, nil
}

// errNotYetExpired: a payment too close to its max age to be charged
// within a lease is neither charged nor expired until the age has passed.
var errNotYetExpired = errors.New("too close to its max age to charge; it expires unless the provider has charged it")

// outcome asks the provider what becomes of q: found by key when a call may
// have reached it (or when q expired), else charged now. A charge is made
// only while its whole lease ends before the max age, so that no call is in
// flight when the payment expires. Every call ends with the forwarder's
// lease (leaseUntil), as a request's owner's does: a forwarder paused
// between its claim and its call past its lease calls nothing, since
// another may hold the payment by then.
func (f *Forwarder) outcome(ctx context.Context, a Attempt, q Forward, now, leaseUntil time.Time) (Outcome, error) {
	s := f.Service
	op := payments{s}
	budget := min(s.ProviderTimeout, leaseUntil.Sub(s.Now()))
	if budget <= 0 {
		return Outcome{}, errLeaseRanOut
	}
	pctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	expired := !now.Before(q.ExpiresAt)
	if q.Reached || expired {
		o, found, err := op.find(pctx, a)
		if err != nil || found {
			return o, err
		}
	}
	switch {
	case expired:
		return expiredOutcome(), nil
	case now.Add(s.Lease).After(q.ExpiresAt):
		return Outcome{}, errNotYetExpired
	}
	return op.move(pctx, a)
}

// List is a page of a list in Stripe's shape.
type List[T any] struct {
	Object  string `json:"object"` // "list"
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
}

// DefaultListLimit and MaxListLimit bound a page, as Stripe's do.
const (
	DefaultListLimit = 10
	MaxListLimit     = 100
)

// page cuts a store's answer of up to limit+1 items, newest first, to a
// page of limit and says whether there are more: the extra one is the
// oldest, or, for the page ending before an id, the newest.
func page[T any](items []T, limit int, endingBefore bool) ([]T, bool) {
	if len(items) <= limit {
		return items, false
	}
	if endingBefore {
		return items[len(items)-limit:], true
	}
	return items[:limit], true
}

// ListPayments returns a page of f.Scope's payments, newest first (their
// refunds are listed under each payment's own refunds).
func (s *Service) ListPayments(ctx context.Context, f PaymentFilter) (List[View], error) {
	list := List[View]{Object: "list", Data: []View{}, URL: "/v1/payments"}
	ps, err := s.Store.ListPayments(ctx, f)
	if err != nil {
		return list, err
	}
	ps, list.HasMore = page(ps, f.Limit, f.EndingBefore != "")
	for _, p := range ps {
		list.Data = append(list.Data, p.View(nil))
	}
	return list, nil
}
