package payment

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/oncepay/oncepay/internal/crashpoint"
)

// EventKind is what a provider event says about a payment, whatever the
// provider calls it.
type EventKind string

const (
	// EventSucceeded: the provider charged (Stripe payment_intent.succeeded,
	// the sim's charge.succeeded).
	EventSucceeded EventKind = "succeeded"
	// EventFailed: the provider refused the charge (Stripe
	// payment_intent.payment_failed, the sim's charge.failed).
	EventFailed EventKind = "failed"
	// EventRefunded: the provider made a refund (the sim's
	// refund.succeeded, Stripe's refund.created or refund.updated with the
	// refund succeeded).
	EventRefunded EventKind = "refunded"
	// EventRefundFailure: the provider failed a refund, maybe after it
	// succeeded: the bank returned it (Stripe refund.failed, and
	// charge.refund.updated with the refund failed; the sim's
	// refund.failed).
	EventRefundFailure EventKind = "refund_failed"
	// EventDisputed: a cardholder disputed a payment, or the dispute moved
	// or closed (Stripe charge.dispute.created and charge.dispute.closed,
	// the sim's charge.dispute.created and charge.dispute.closed).
	EventDisputed EventKind = "disputed"
	// EventOther: a type oncepay does not use.
	EventOther EventKind = "other"
)

// Event is a verified provider event, reduced to what settling an attempt
// needs. A verifier builds it from the raw body only after the signature
// checked out.
type Event struct {
	Provider string    `json:"provider"` // "stripe", "sim"
	ID       string    `json:"id"`       // the provider's event id: the inbox's dedupe key
	Type     string    `json:"type"`     // the provider's own name of the type
	Kind     EventKind `json:"kind"`
	// PaymentID and DownstreamKey name the attempt: oncepay's payment id
	// finds the row (an index that exists anyway), the downstream key proves
	// it is the row this charge was made for.
	PaymentID     string `json:"payment_id,omitempty"`
	DownstreamKey string `json:"downstream_key,omitempty"`
	Charge        Charge `json:"charge"`                   // EventSucceeded: what was charged
	DeclineCode   string `json:"decline_code,omitempty"`   // EventFailed, EventRefundFailure
	DeclineReason string `json:"decline_reason,omitempty"` // EventFailed, meant for the customer
	// RefundID and ProviderRefundID name a refund event's refund, as
	// oncepay and the provider call it; DownstreamKey is then the refund's.
	RefundID         string `json:"refund_id,omitempty"`
	ProviderRefundID string `json:"provider_refund_id,omitempty"`
	// Dispute is what an EventDisputed says of the dispute: its id finds
	// it at the provider, which says the rest.
	Dispute *Dispute `json:"dispute,omitempty"`
}

// Problem types of the webhook endpoint.
const (
	ProblemInvalidWebhook  = "/problems/invalid-webhook"   // 400: not signed by the provider; nothing stored
	ProblemEventInProgress = "/problems/event-in-progress" // 503: another copy is being applied
	ProblemEventNotApplied = "/problems/event-not-applied" // 503: stored, its try failed; redeliver
)

// EventState is where an event stands in the inbox.
type EventState string

const (
	// EventReceived: verified and stored, not yet picked up.
	EventReceived EventState = "received"
	// EventProcessing: a processor holds it under a lease and a fence.
	EventProcessing EventState = "processing"
	// EventProcessed: applied (or found already applied); final.
	EventProcessed EventState = "processed"
	// EventFailedState: the last try failed; a redelivery, the sweep or an
	// operator tries again, until MaxAttempts.
	EventFailedState EventState = "failed"
	// EventIgnored: nothing to apply (a type oncepay does not use, a payment
	// it does not know, a final state it must not change); final.
	EventIgnored EventState = "ignored"
)

// Final reports whether nothing will ever be done with the event again.
func (s EventState) Final() bool { return s == EventProcessed || s == EventIgnored }

// InboxEvent is an event as the inbox keeps it.
type InboxEvent struct {
	Event
	State          EventState
	Attempts       int       // processing tries begun
	Fence          int64     // bumped by every try; guards the finish
	LeaseExpiresAt time.Time // zero unless processing
	Result         string    // what applying it did, for the operator
	LastError      string
	ReceivedAt     time.Time
	UpdatedAt      time.Time
}

// EventFilter selects events for the admin page.
type EventFilter struct {
	State EventState // "" for all
	Limit int
}

// EventStore keeps the inbox. Receiving is a claim of (provider, event id):
// a duplicate is a result, not an error.
type EventStore interface {
	// ReceiveEvent inserts e in state received unless (provider, id) exists.
	ReceiveEvent(ctx context.Context, e *InboxEvent) (claimed bool, err error)
	// InboxEvent returns the stored event or an ENOTFOUND error.
	InboxEvent(ctx context.Context, provider, id string) (*InboxEvent, error)
	// BeginEvent makes the caller the event's processor if it is still
	// under fence and may be processed at now: received, failed, or
	// processing with an expired lease. It bumps the fence and the attempts.
	BeginEvent(ctx context.Context, provider, id string, fence int64, now, leaseUntil time.Time) (newFence int64, ok bool, err error)
	// FinishEvent stores the end of a try if fence still holds it.
	FinishEvent(ctx context.Context, provider, id string, fence int64, state EventState, result, lastErr string, now time.Time) (ok bool, err error)
	// StrandedEvents returns up to limit events a processor left: received
	// before receivedBefore and never begun, processing with a lease expired
	// at now, or failed before receivedBefore with fewer than maxAttempts
	// tries (a sender may have given up on them).
	StrandedEvents(ctx context.Context, receivedBefore, now time.Time, maxAttempts, limit int) ([]InboxEvent, error)
	// ListEvents returns events newest first.
	ListEvents(ctx context.Context, f EventFilter) ([]InboxEvent, error)
	// AttemptByPaymentID finds an attempt by payment id in any scope.
	AttemptByPaymentID(ctx context.Context, id string) (*ListedAttempt, error)

	// PaymentByID and RefundByID find a payment or a refund by id in any
	// scope, or return an ENOTFOUND error: an event names what it is about
	// by oncepay's id, long after its key's record may have been purged.
	PaymentByID(ctx context.Context, id string) (*Payment, error)
	RefundByID(ctx context.Context, id string) (*Refund, error)

	// FailRefund records that the bank failed the refund id of scope after
	// it succeeded: in one transaction, if and only if the refund is still
	// succeeded, it becomes failed with failureCode, its amount goes back
	// to its payment's refundable balance, and e is written. ok is false,
	// and nothing is written, for a refund not succeeded (in progress,
	// failed already) or not in scope. The attempt's stored answer is not
	// touched: a replay gets the bytes its first request got.
	FailRefund(ctx context.Context, scope, id, failureCode string, e *OutboxEvent, now time.Time) (ok bool, err error)

	// SetDispute stores d as the dispute of the payment id of scope, and
	// writes e, in one transaction, if d changes what the payment holds:
	// no dispute or another one before, or this one's status moved while
	// it was open. A dispute that is closed stays so. ok is false, and
	// nothing is written, otherwise.
	SetDispute(ctx context.Context, scope, id string, d Dispute, e *OutboxEvent, now time.Time) (ok bool, err error)
}

// Delivery is the inbox's answer to one delivery of an event.
type Delivery struct {
	State     EventState
	Duplicate bool // the event was already in the inbox
	// Busy: another copy of the event holds it right now; its outcome is not
	// yet durable, so this copy must not be told "done".
	Busy bool
}

// Done reports whether the sender may stop delivering: the outcome is final
// and durable.
func (d Delivery) Done() bool { return d.State.Final() }

// Why the inbox refused to apply an event (Inbox.Refused).
const (
	// RefusedOtherProvider: the event came from another provider's
	// endpoint than the one the payment's attempt was made through.
	RefusedOtherProvider = "other_provider"
	// RefusedUnconfirmed: a success event about a payment in progress the
	// provider, asked by its key, has no charge for; held failed.
	RefusedUnconfirmed = "unconfirmed"
	// RefusedMismatch: a success event whose charge is for another amount
	// or currency than the payment; ignored.
	RefusedMismatch = "mismatch"
	// RefusedConflict: an event that contradicts a final answer a client
	// may already hold: a success about a payment that failed or succeeded
	// as another charge, a refund's success about a refund that failed
	// while the provider says it succeeded. Held failed, logged as an
	// error for an operator: money may have moved twice.
	RefusedConflict = "conflict"
	// RefusedContradicted: a refund's failure the provider, asked by the
	// refund's key, contradicts (it says the refund succeeded, or holds
	// none): held failed, tried again in case the provider lags.
	RefusedContradicted = "contradicted"
)

// Inbox applies provider events to attempts, each at most once, through
// the same guarded, fenced record a request or reconcile uses.
type Inbox struct {
	Store EventStore
	// Service holds the attempts (its Store's TakeOver and Record) and
	// the provider they were made through (ProviderName).
	Service *Service
	// Endpoint is the webhook endpoint (Event.Provider: "sim", "stripe")
	// of the provider Service pays through. An event settles an attempt
	// only if it came from this endpoint and the attempt was made through
	// Service's provider: one provider's signature never moves another's
	// payments.
	Endpoint string
	Log      *slog.Logger
	Now      func() time.Time
	// Lease is how long a processor holds an event before another may take
	// it. (An attempt it takes over, it holds for Service.Lease.)
	Lease time.Duration
	// MaxAttempts bounds the automatic tries of an event; past them it stays
	// failed until an operator redelivers it.
	MaxAttempts int
	// Observe, if set, is told the outcome of every delivery and try.
	Observe func(provider, eventType, outcome string)
	// Refused, if set, is told of every try that refused to apply an
	// event, and why (one of the Refused constants).
	Refused func(provider, reason string)
}

// NewInbox returns an inbox over store that settles svc's attempts from the
// events of endpoint, with its defaults set; it logs and tells time as svc.
func NewInbox(store EventStore, svc *Service, endpoint string, lease time.Duration) *Inbox {
	if lease <= 0 {
		panic("payment: NewInbox: lease must be positive")
	}
	return &Inbox{Store: store, Service: svc, Endpoint: endpoint, Log: svc.Log, Now: svc.Now, Lease: lease, MaxAttempts: 10}
}

// Deliver takes one delivery of a verified event: the first copy claims it
// and applies it; a copy of a final event is answered from the inbox; a
// copy that finds another copy at work gets Busy, so its sender redelivers
// and learns the outcome once it is durable.
func (in *Inbox) Deliver(ctx context.Context, ev Event) (Delivery, error) {
	// An answer lost to a hang-up must not abandon a try half done.
	ctx = context.WithoutCancel(ctx)
	now := in.Now()
	e := InboxEvent{Event: ev, State: EventReceived, ReceivedAt: now, UpdatedAt: now}
	claimed, err := in.Store.ReceiveEvent(ctx, &e)
	if err != nil {
		return Delivery{}, err
	}
	cur := &e
	if !claimed {
		if cur, err = in.Store.InboxEvent(ctx, ev.Provider, ev.ID); err != nil {
			return Delivery{}, err
		}
	}
	d, err := in.try(ctx, cur, false)
	d.Duplicate = !claimed
	in.observe(ev, d, err)
	return d, err
}

// Redeliver processes a stored failed event again, past MaxAttempts: what
// the admin page's button does.
func (in *Inbox) Redeliver(ctx context.Context, provider, id string) (Delivery, error) {
	cur, err := in.Store.InboxEvent(ctx, provider, id)
	if err != nil {
		return Delivery{}, err
	}
	if cur.State != EventFailedState && cur.State != EventReceived {
		return Delivery{}, Errorf(EINVALID, "Only a failed event can be redelivered; this one is %s.", cur.State)
	}
	d, err := in.try(ctx, cur, true)
	in.observe(cur.Event, d, err)
	return d, err
}

// SweepResult is what one sweep did.
type SweepResult struct {
	Found, Processed, Failed int
}

func (r SweepResult) String() string {
	return fmt.Sprintf("inbox sweep: %d stranded events, %d settled, %d still failing", r.Found, r.Processed, r.Failed)
}

// Sweep takes over the events a processor left behind (it died between
// receiving and finishing), so an event whose sender gave up still lands.
func (in *Inbox) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	now := in.Now()
	stranded, err := in.Store.StrandedEvents(ctx, now.Add(-in.Lease), now, in.MaxAttempts, 100)
	if err != nil {
		return res, err
	}
	for i := range stranded {
		res.Found++
		d, err := in.try(ctx, &stranded[i], false)
		in.observe(stranded[i].Event, d, err)
		if err != nil {
			return res, err
		}
		if d.Done() {
			res.Processed++
		} else if d.State == EventFailedState {
			res.Failed++
		}
	}
	return res, nil
}

// try begins a try of cur if it may be begun, applies the event and
// finishes the try. A fenced-out processor answers from what the winner
// left.
func (in *Inbox) try(ctx context.Context, cur *InboxEvent, operator bool) (Delivery, error) {
	now := in.Now()
	switch {
	case cur.State.Final():
		return Delivery{State: cur.State}, nil
	case cur.State == EventProcessing && cur.LeaseExpiresAt.After(now):
		return Delivery{State: cur.State, Busy: true}, nil
	case cur.State == EventFailedState && cur.Attempts >= in.MaxAttempts && !operator:
		return Delivery{State: cur.State}, nil
	}
	fence, ok, err := in.Store.BeginEvent(ctx, cur.Provider, cur.ID, cur.Fence, now, now.Add(in.Lease))
	if err != nil {
		return Delivery{}, err
	}
	if !ok {
		return in.current(ctx, cur.Event)
	}
	crashpoint.Hit("in-event") // claimed and begun, not yet applied
	state, result, applyErr := in.apply(ctx, cur.Event)
	crashpoint.Hit("after-apply") // the attempt is settled, the event not yet finished
	lastErr := ""
	if applyErr != nil {
		state, lastErr = EventFailedState, ErrorMessage(applyErr)
		if ErrorCode(applyErr) == EINTERNAL {
			lastErr = applyErr.Error() // the operator's page, never a client's
		}
		in.Log.Warn("event not applied; left for a redelivery", "provider", cur.Provider, "event_id", cur.ID, "err", applyErr)
	}
	ok, err = in.Store.FinishEvent(ctx, cur.Provider, cur.ID, fence, state, result, lastErr, in.Now())
	if err != nil {
		return Delivery{}, err
	}
	if !ok { // our lease ran out and another processor took the event
		return in.current(ctx, cur.Event)
	}
	return Delivery{State: state}, nil
}

// current answers from the inbox as it stands, for a copy that lost the race.
func (in *Inbox) current(ctx context.Context, ev Event) (Delivery, error) {
	cur, err := in.Store.InboxEvent(ctx, ev.Provider, ev.ID)
	if err != nil {
		return Delivery{}, err
	}
	return Delivery{State: cur.State, Busy: !cur.State.Final()}, nil
}

// errAttemptBusy: a live request owns the attempt; it will record the same
// answer, or release it, and the event's next try settles or confirms it.
var errAttemptBusy = Errorf(EINPROGRESS, "A request holds this payment's attempt right now; the event is tried again.")

// apply settles the attempt the event names and returns the state the
// event ends in. An error leaves the event failed, to be tried again.
func (in *Inbox) apply(ctx context.Context, ev Event) (EventState, string, error) {
	switch ev.Kind {
	case EventSucceeded, EventFailed:
		return in.applyPayment(ctx, ev)
	case EventRefunded, EventRefundFailure:
		return in.applyRefund(ctx, ev)
	case EventDisputed:
		return in.applyDispute(ctx, ev)
	}
	return EventIgnored, "event type not used", nil
}

// applyPayment settles the payment a charge's event names.
func (in *Inbox) applyPayment(ctx context.Context, ev Event) (EventState, string, error) {
	la, err := in.Store.AttemptByPaymentID(ctx, ev.PaymentID)
	if ErrorCode(err) == ENOTFOUND || err == nil && (la.Kind != KindPayment || DownstreamKey(la.Scope, la.Key) != ev.DownstreamKey) {
		in.Log.Info("event for a payment oncepay does not know; ignored", "provider", ev.Provider, "event_id", ev.ID, "payment_id", ev.PaymentID)
		return EventIgnored, "unknown payment", nil
	}
	if err != nil {
		return "", "", err
	}
	a := la.Attempt
	if ev.Provider != in.Endpoint || a.Provider == "" || a.Provider != in.Service.ProviderName {
		made := "a provider not known"
		if a.Provider != "" {
			made = a.Provider
		}
		in.refuse(ev, RefusedOtherProvider, in.Log.Warn, "event from another provider than the payment's; ignored", "payment_id", a.ID, "payment_provider", a.Provider)
		return EventIgnored, fmt.Sprintf("not applied: the payment was made through %s, not the provider of the %s endpoint", made, ev.Provider), nil
	}
	if ev.Kind == EventSucceeded && !ev.Charge.matches(a) {
		in.refuse(ev, RefusedMismatch, in.Log.Warn, "event's charge is for another amount or currency than the payment; ignored",
			"payment_id", a.ID, "amount", a.Amount, "currency", a.Currency, "event_amount", ev.Charge.Amount, "event_currency", ev.Charge.Currency)
		return EventIgnored, fmt.Sprintf("not applied: the event's charge is %d %s, the payment %d %s", ev.Charge.Amount, ev.Charge.Currency, a.Amount, a.Currency), nil
	}
	// The event is a hint: the provider, asked by the payment's key, says
	// what is recorded. Nothing there means it moved no money, which a
	// decline says too; a success it does not know is held failed.
	return in.settle(ctx, ev, a, func(a Attempt) (Outcome, bool) {
		if ev.Kind == EventFailed {
			return declinedOutcome(a, &DeclineError{Code: ev.DeclineCode, Message: ev.DeclineReason}), true
		}
		return Outcome{}, false
	}, func(a Attempt) (EventState, string, error) { return in.final(ev, a) })
}

// settle brings a, the attempt of a payment or refund an event names, to
// what the provider holds under its key, through confirm (the takeover
// and the fenced record a request or reconcile uses); absent says what
// the provider holding nothing means. An attempt that is, or becomes,
// final is decided by final.
func (in *Inbox) settle(ctx context.Context, ev Event, a Attempt, absent func(Attempt) (Outcome, bool), final func(Attempt) (EventState, string, error)) (EventState, string, error) {
	for range 2 { // once more after losing the attempt to a request or reconcile
		if a.Status != InProgress {
			return final(a)
		}
		if a.LeaseLive(in.Now()) {
			return "", "", errAttemptBusy
		}
		o, lookupErr, err := in.Service.confirm(ctx, a, absent)
		switch {
		case err != nil:
			return "", "", err
		case lookupErr != nil:
			return "", "", &Error{Code: EUNAVAILABLE, Message: "The provider could not confirm the event: " + lookupErr.Error(), Err: lookupErr}
		case o.Status == InProgress:
			in.refuse(ev, RefusedUnconfirmed, in.Log.Warn, "the provider has nothing under the key of the "+string(a.Kind)+"; event not applied",
				"id", a.ID, "event_charge_id", ev.Charge.ID)
			return "", "", unconfirmed(a.Kind)
		case o.Status != "":
			if ev.Kind == EventSucceeded && o.ChargeID != ev.Charge.ID {
				in.Log.Warn("event names another charge than the provider holds under the payment's key; the provider's recorded",
					"provider", ev.Provider, "event_id", ev.ID, "payment_id", a.ID, "charge_id", o.ChargeID, "event_charge_id", ev.Charge.ID)
			}
			in.Log.Info("event settled attempt", "provider", ev.Provider, "event_id", ev.ID, "kind", a.Kind, "id", a.ID, "status", o.Status, "charge_id", o.ChargeID)
			return EventProcessed, "settled " + string(o.Status), nil
		}
		cur, err := in.Service.Store.Attempt(ctx, a.Scope, a.Key)
		if err != nil {
			return "", "", err
		}
		a = *cur
	}
	return "", "", errAttemptBusy
}

// unconfirmed is the error of an event the provider, asked by the key of
// the attempt of kind k, does not confirm: it has nothing there. It stays
// failed, tried again, in case the provider's answer lags; the attempt
// waits for its client's retry or reconcile.
func unconfirmed(k Kind) error {
	if k == KindRefund {
		return Errorf(ENOTFOUND, "Not applied: the provider has no refund under this refund's key. The refund stays in progress for its client's retry or reconcile.")
	}
	return Errorf(ENOTFOUND, "Not applied: the provider has no charge under this payment's key. The payment stays in progress for its client's retry or reconcile.")
}

// held is the error of an event held failed because it contradicts what
// is stored, or what the provider says: why, for the operator's page. It
// is tried again (the provider may lag), and an operator may redeliver it.
func held(format string, args ...any) error {
	return Errorf(ENOTFOUND, "Held: "+format, args...)
}

// final decides an event about an attempt already settled: one that agrees
// is processed (nothing to do); one that disagrees never changes a final
// answer the client may already hold. A late failure is logged; a success
// the record does not hold (money moved that the client was told did not,
// or moved twice: another charge than the payment's) is held failed for an
// operator, with its reason, logged as an error and counted.
func (in *Inbox) final(ev Event, a Attempt) (EventState, string, error) {
	if a.Status == Queued {
		// Its client holds a 202, not an outcome: the forwarder settles it,
		// by asking the provider by key, as it would without the event.
		return EventIgnored, "not applied: the payment is queued offline; the forwarder settles it by asking the provider", nil
	}
	agrees := ev.Kind == EventSucceeded && a.Status == Succeeded && a.ChargeID == ev.Charge.ID ||
		ev.Kind == EventFailed && a.Status == Failed
	if agrees {
		return EventProcessed, "already " + string(a.Status), nil
	}
	args := []any{"payment_id", a.ID, "status", a.Status, "charge_id", a.ChargeID, "event_charge_id", ev.Charge.ID}
	if ev.Kind == EventFailed {
		in.Log.Warn("event disagrees with a final attempt; not applied", append([]any{"provider", ev.Provider, "event_id", ev.ID}, args...)...)
		return EventIgnored, fmt.Sprintf("not applied: the payment already %s; a %s event does not change it", a.Status, ev.Kind), nil
	}
	in.refuse(ev, RefusedConflict, in.Log.Error, "event disagrees with a final attempt; not applied", args...)
	if a.Status == Succeeded {
		return "", "", held("flagged for an operator: the payment succeeded as charge %s, and this event says charge %s succeeded: money may have moved twice.", a.ChargeID, ev.Charge.ID)
	}
	return "", "", held("flagged for an operator: the payment failed (its client was told so), and this event says charge %s succeeded: money may have moved.", ev.Charge.ID)
}

// refuse logs, with log, and counts a try that refused ev for reason.
func (in *Inbox) refuse(ev Event, reason string, log func(string, ...any), msg string, args ...any) {
	log(msg, append([]any{"provider", ev.Provider, "event_id", ev.ID, "reason", reason}, args...)...)
	if in.Refused != nil {
		in.Refused(ev.Provider, reason)
	}
}

// observe reports a delivery's outcome: processed, ignored, failed, busy,
// or error.
func (in *Inbox) observe(ev Event, d Delivery, err error) {
	if in.Observe == nil {
		return
	}
	outcome := string(d.State)
	switch {
	case err != nil:
		outcome = "error"
	case d.Busy:
		outcome = "busy"
	case d.Duplicate && d.Done():
		outcome = "duplicate"
	}
	in.Observe(ev.Provider, ev.Type, outcome)
}
