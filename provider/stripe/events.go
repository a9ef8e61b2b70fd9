package stripe

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	stripe "github.com/stripe/stripe-go/v85"
	"github.com/stripe/stripe-go/v85/webhook"

	"github.com/oncepay/oncepay/payment"
)

// WebhookTolerance is how far a Stripe-Signature timestamp may be from
// now, either way: Stripe's own default for an old one, which stops the
// replay of a captured delivery, and the same for one ahead of the clock.
const WebhookTolerance = 5 * time.Minute

// ErrBadSignature is a webhook whose Stripe-Signature does not verify: none,
// a malformed one, a wrong secret or body, or a timestamp too old or too
// far ahead.
var ErrBadSignature = errors.New("stripe: webhook signature does not verify")

// VerifyWebhook checks the Stripe-Signature header over the raw body with
// stripe-go's webhook package (HMAC-SHA256 over "t.body", constant-time,
// within WebhookTolerance of now, past or future) and only then reads the
// event. The event's API version may differ from the SDK's: the fields read
// here (the PaymentIntent's id, amount, currency, metadata and last error)
// are the same in every version oncepay supports. A verified body that is
// not a snapshot event (a thin event notification) is an EINVALID error
// whose message says so.
func VerifyWebhook(secret, signature string, body []byte) (payment.Event, error) {
	err := webhook.ValidatePayloadWithTolerance(body, signature, secret, WebhookTolerance)
	switch {
	case errors.Is(err, webhook.ErrNotSigned), errors.Is(err, webhook.ErrInvalidHeader),
		errors.Is(err, webhook.ErrNoValidSignature), errors.Is(err, webhook.ErrTooOld):
		return payment.Event{}, fmt.Errorf("%w: %v", ErrBadSignature, err)
	case err != nil:
		return payment.Event{}, fmt.Errorf("stripe: webhook signature: %w", err)
	}
	// stripe-go refuses only a timestamp too old; one far ahead of the
	// clock would be replayable for as long.
	if ahead := time.Until(signedAt(signature)); ahead > WebhookTolerance {
		return payment.Event{}, fmt.Errorf("%w: timestamp %s ahead of this clock, past %s", ErrBadSignature, ahead.Round(time.Second), WebhookTolerance)
	}
	var head struct {
		Object string `json:"object"`
	}
	if json.Unmarshal(body, &head) == nil && head.Object != "event" {
		return payment.Event{}, unsupported(head.Object)
	}
	var e stripe.Event
	switch err := json.Unmarshal(body, &e); {
	case err != nil:
		return payment.Event{}, fmt.Errorf("stripe: webhook body: %w", err)
	case e.ID == "":
		return payment.Event{}, errors.New("stripe: webhook body: no event id")
	}
	ev := payment.Event{Provider: "stripe", ID: e.ID, Type: string(e.Type), Kind: payment.EventOther}
	switch e.Type {
	case stripe.EventTypePaymentIntentSucceeded, stripe.EventTypePaymentIntentPaymentFailed:
	case stripe.EventTypeRefundCreated, stripe.EventTypeRefundUpdated, stripe.EventTypeRefundFailed, stripe.EventTypeChargeRefundUpdated:
		return refundEvent(ev, e.Data)
	case stripe.EventTypeChargeDisputeCreated, stripe.EventTypeChargeDisputeUpdated, stripe.EventTypeChargeDisputeClosed:
		return disputeEvent(ev, e.Data)
	default:
		return ev, nil
	}
	if e.Data == nil {
		return payment.Event{}, errors.New("stripe: webhook body: no data object")
	}
	var pi stripe.PaymentIntent
	if err := json.Unmarshal(e.Data.Raw, &pi); err != nil {
		return payment.Event{}, fmt.Errorf("stripe: webhook body: payment intent: %w", err)
	}
	ev.PaymentID, ev.DownstreamKey = pi.Metadata[MetaPayment], pi.Metadata[MetaKey]
	if e.Type == stripe.EventTypePaymentIntentSucceeded {
		ev.Kind, ev.Charge = payment.EventSucceeded, chargeOf(&pi, ev.DownstreamKey)
		return ev, nil
	}
	ev.Kind, ev.DeclineCode, ev.DeclineReason = payment.EventFailed, "card_declined", "Your card was declined."
	if pe := pi.LastPaymentError; pe != nil {
		ev.DeclineCode = declineCode(pe)
		if pe.Msg != "" {
			ev.DeclineReason = pe.Msg
		}
	}
	return ev, nil
}

// refundEvent reads a Refund's event: made (succeeded, or pending: taken,
// as Refund reads it), or failed (failed, canceled), named by the metadata
// Refund set on it. Any other status is not used.
func refundEvent(ev payment.Event, data *stripe.EventData) (payment.Event, error) {
	var r stripe.Refund
	if data == nil || json.Unmarshal(data.Raw, &r) != nil || r.ID == "" {
		return payment.Event{}, errors.New("stripe: webhook body: no readable refund")
	}
	ev.RefundID, ev.PaymentID, ev.DownstreamKey, ev.ProviderRefundID = r.Metadata[MetaRefund], r.Metadata[MetaPayment], r.Metadata[MetaKey], r.ID
	switch r.Status {
	case stripe.RefundStatusSucceeded, stripe.RefundStatusPending:
		ev.Kind = payment.EventRefunded
	case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
		ev.Kind, ev.DeclineCode = payment.EventRefundFailure, string(r.FailureReason)
		if ev.DeclineCode == "" {
			ev.DeclineCode = "refund_" + string(r.Status)
		}
	}
	return ev, nil
}

// disputeEvent reads a Dispute's event. Its payment is learned by asking
// Stripe (LookupDispute), as is where it stands.
func disputeEvent(ev payment.Event, data *stripe.EventData) (payment.Event, error) {
	var d stripe.Dispute
	if data == nil || json.Unmarshal(data.Raw, &d) != nil || d.ID == "" {
		return payment.Event{}, errors.New("stripe: webhook body: no readable dispute")
	}
	ev.Kind = payment.EventDisputed
	ev.Dispute = &payment.Dispute{ID: d.ID, Status: string(d.Status), Reason: string(d.Reason), Amount: d.Amount}
	if d.PaymentIntent != nil {
		ev.Charge.ID = d.PaymentIntent.ID
	}
	return ev, nil
}

// declineCode is the most specific reason Stripe gives, as Charge stores it.
func declineCode(se *stripe.Error) string {
	switch {
	case se.DeclineCode != "":
		return string(se.DeclineCode)
	case se.Code != "":
		return string(se.Code)
	}
	return "card_declined"
}

// signedAt is the t= timestamp of a Stripe-Signature header that verified.
func signedAt(signature string) time.Time {
	for _, pair := range strings.Split(signature, ",") {
		if v, ok := strings.CutPrefix(pair, "t="); ok {
			if t, err := strconv.ParseInt(v, 10, 64); err == nil {
				return time.Unix(t, 0)
			}
		}
	}
	return time.Time{}
}

// unsupported is the error for a signed body oncepay does not read: what
// the object is, and what to send instead.
func unsupported(object string) error {
	what := fmt.Sprintf("not a Stripe event (its object is %q)", object)
	if strings.HasPrefix(object, "v2.") {
		what = fmt.Sprintf("a thin event notification (%q), which oncepay does not read", object)
	}
	return &payment.Error{Code: payment.EINVALID, Err: errors.New("stripe: webhook body: " + what),
		Message: "The signature verified, but the body is " + what + ": send this endpoint snapshot events " +
			"(payment_intent.succeeded, payment_intent.payment_failed, refund.failed, charge.refund.updated, " +
			"charge.dispute.created, charge.dispute.closed) from an endpoint of Stripe's v1 events."}
}
