package payment

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// EventType names the change an OutboxEvent reports, as Stripe names its
// event types.
type EventType string

// The changes oncepay tells a merchant of: every state change of a payment
// or a refund has exactly one.
const (
	EventPaymentSucceeded EventType = "payment.succeeded"
	EventPaymentFailed    EventType = "payment.failed" // declined, or reconciled as never charged
	EventPaymentQueued    EventType = "payment.queued" // taken while the provider could not be reached
	EventPaymentExpired   EventType = "payment.expired"
	EventRefundSucceeded  EventType = "refund.succeeded"
	EventRefundFailed     EventType = "refund.failed" // declined, or failed by the bank after it succeeded
	// A payment's dispute, as the provider tells of it: opened, and
	// closed (won, lost). The payment stays succeeded; its dispute field
	// says where the dispute stands.
	EventPaymentDisputed      EventType = "payment.disputed"
	EventPaymentDisputeClosed EventType = "payment.dispute_closed"
)

// EventTypes are every EventType, in the order the docs list them.
var EventTypes = []EventType{
	EventPaymentSucceeded, EventPaymentFailed, EventPaymentQueued, EventPaymentExpired,
	EventRefundSucceeded, EventRefundFailed, EventPaymentDisputed, EventPaymentDisputeClosed,
}

// ValidEventType reports whether t is one of EventTypes.
func ValidEventType(t EventType) bool {
	for _, v := range EventTypes {
		if t == v {
			return true
		}
	}
	return false
}

// OutboxEvent is an event oncepay tells a merchant: one state change of a
// payment or a refund, with one id forever, written in the transaction
// that makes the change (the outbox), so the change is never without its
// event nor the event without its change. The merchant dedupes by its id.
type OutboxEvent struct {
	ID        string // evt_..., time-ordered
	Scope     string // the merchant
	Type      EventType
	ObjectID  string // the payment or refund it is about
	CreatedAt time.Time
	// Body is the event as GET /v1/events and every delivery show it, in
	// Stripe's shape: id, object "event", type, created (Unix seconds), and
	// data.object, the payment or refund as GET showed it at that moment.
	Body []byte
}

// ChangeEvent is the event of the change o records on attempt a at now:
// its payment, or its refund, as GET shows it once o is recorded. A
// payment's view has no refunds: a payment is refunded only once it
// succeeded, and then no longer changes state.
func ChangeEvent(a Attempt, o Outcome, now time.Time) *OutboxEvent {
	return changeEvent(a, o, now, NewEventID())
}

// changeEvent is ChangeEvent under the event id eventID.
func changeEvent(a Attempt, o Outcome, now time.Time, eventID string) *OutboxEvent {
	var typ EventType
	if a.Kind == KindRefund {
		typ = EventRefundFailed
		if o.Status == Succeeded {
			typ = EventRefundSucceeded
		}
	} else if typ = paymentEventTypes[o.Status]; typ == "" {
		panic("payment: no event for a change to " + string(o.Status)) // only final statuses and queued are recorded
	}
	object := o.view // the answer's own JSON, when it is the view
	if object == nil {
		a.Status, a.ChargeID, a.FailureCode = o.Status, o.ChargeID, o.FailureCode
		if a.Kind == KindRefund {
			object = a.RefundView().Body()
		} else {
			object = a.View().Body()
		}
	}
	return objectEvent(eventID, a.Scope, typ, a.ID, object, now)
}

// objectEvent is the event eventID of type typ about the object id of
// scope, whose JSON (as GET shows it after the change) is object.
func objectEvent(eventID, scope string, typ EventType, id string, object []byte, now time.Time) *OutboxEvent {
	e := &OutboxEvent{ID: eventID, Scope: scope, Type: typ, ObjectID: id, CreatedAt: now.UTC().Truncate(time.Millisecond)}
	// Stripe's shape, written out: only the view needs encoding/json (the
	// id and the type are ASCII letters, digits, "_" and ".").
	b := make([]byte, 0, len(object)+128)
	b = append(b, `{"id":"`...)
	b = append(b, e.ID...)
	b = append(b, `","object":"event","type":"`...)
	b = append(b, e.Type...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, e.CreatedAt.Unix(), 10)
	b = append(b, `,"data":{"object":`...)
	b = append(b, bytes.TrimSuffix(object, []byte("\n"))...)
	e.Body = append(b, "}}"...)
	return e
}

// RefundFailedEvent is the event of a refund that succeeded and then
// failed (the bank returned it) with code: the refund as GET shows it once
// failed.
func RefundFailedEvent(r Refund, code string, now time.Time) *OutboxEvent {
	r.Status, r.FailureCode = Failed, code
	return objectEvent(NewEventID(), r.Scope, EventRefundFailed, r.ID, r.View().Body(), now)
}

// DisputeEvent is the event of dispute d on payment p: payment.disputed,
// or payment.dispute_closed once d is closed. Like ChangeEvent's, the
// payment's view has no refunds.
func DisputeEvent(p Payment, d Dispute, now time.Time) *OutboxEvent {
	typ := EventPaymentDisputed
	if d.Closed() {
		typ = EventPaymentDisputeClosed
	}
	p.Dispute = &d
	return objectEvent(NewEventID(), p.Scope, typ, p.ID, p.View(nil).Body(), now)
}

// paymentEventTypes is the event of a payment's change to each status.
var paymentEventTypes = map[Status]EventType{
	Succeeded: EventPaymentSucceeded, Failed: EventPaymentFailed,
	Queued: EventPaymentQueued, Expired: EventPaymentExpired,
}

// withEvent is o carrying the event of its change on a, which the store
// writes in the transaction that records o.
func (s *Service) withEvent(a Attempt, o Outcome) Outcome {
	o.Event = ChangeEvent(a, o, s.Now())
	return o
}

// NewEventID returns a fresh event id, time-ordered like a payment's: the
// time in microseconds, then 80 random bits.
func NewEventID() string { return eventIDAt(time.Now()) }

func eventIDAt(t time.Time) string {
	return "evt_" + strings.ToUpper(strconv.FormatInt(t.UnixMicro(), 36)) + rand.Text()[:16]
}

// OutboxFilter selects a merchant's events, a page at a time by id, never
// by offset: newest first, StartingAfter the page after an id,
// EndingBefore the page before one.
type OutboxFilter struct {
	Scope         string
	Type          EventType // "" for all
	StartingAfter string
	EndingBefore  string
	Limit         int
}

// OutboxStore keeps the events oncepay tells merchants. They are written
// by the store methods that make the changes (Record, Queue, Forwarded:
// Outcome.Event), never on their own.
type OutboxStore interface {
	// OutboxEvents returns up to f.Limit+1 events of f.Scope, newest
	// first: the one past the limit tells the caller there are more.
	OutboxEvents(ctx context.Context, f OutboxFilter) ([]OutboxEvent, error)
	// PurgeOutbox deletes up to limit events made before before, oldest
	// first, with their deliveries, and returns how many and how long it
	// held the writing (PurgeStore); never one whose delivery is still
	// pending.
	PurgeOutbox(ctx context.Context, before time.Time, limit int) (int, time.Duration, error)
}

// ListEvents returns a page of f.Scope's events, newest first, each as
// its body: what GET /v1/events and a delivery show alike.
func (s *Service) ListEvents(ctx context.Context, f OutboxFilter) (List[json.RawMessage], error) {
	list := List[json.RawMessage]{Object: "list", Data: []json.RawMessage{}, URL: "/v1/events"}
	es, err := s.Store.OutboxEvents(ctx, f)
	if err != nil {
		return list, err
	}
	es, list.HasMore = page(es, f.Limit, f.EndingBefore != "")
	for _, e := range es {
		list.Data = append(list.Data, e.Body)
	}
	return list, nil
}
