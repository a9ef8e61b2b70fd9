package stripe

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	stripe "github.com/stripe/stripe-go/v85"
	"github.com/stripe/stripe-go/v85/webhook"

	"github.com/oncepay/oncepay/payment"
)

// WebhookTolerance is how old a Stripe-Signature timestamp may be: Stripe's
// own default, which stops the replay of a captured delivery.
const WebhookTolerance = 5 * time.Minute

// ErrBadSignature is a webhook whose Stripe-Signature does not verify: none,
// a malformed one, a wrong secret or body, or a timestamp too old.
var ErrBadSignature = errors.New("stripe: webhook signature does not verify")

// VerifyWebhook checks the Stripe-Signature header over the raw body with
// stripe-go's webhook package (HMAC-SHA256 over "t.body", constant-time,
// within WebhookTolerance) and only then reads the event. The event's API
// version may differ from the SDK's: the fields read here (the
// PaymentIntent's id, amount, currency, metadata and last error) are the
// same in every version oncepay supports.
func VerifyWebhook(secret, signature string, body []byte) (payment.Event, error) {
	e, err := webhook.ConstructEventWithOptions(body, signature, secret, webhook.ConstructEventOptions{
		Tolerance: WebhookTolerance, IgnoreAPIVersionMismatch: true,
	})
	switch {
	case errors.Is(err, webhook.ErrNotSigned), errors.Is(err, webhook.ErrInvalidHeader),
		errors.Is(err, webhook.ErrNoValidSignature), errors.Is(err, webhook.ErrTooOld):
		return payment.Event{}, fmt.Errorf("%w: %v", ErrBadSignature, err)
	case err != nil:
		return payment.Event{}, fmt.Errorf("stripe: webhook body: %w", err)
	case e.ID == "":
		return payment.Event{}, errors.New("stripe: webhook body: no event id")
	}
	ev := payment.Event{Provider: "stripe", ID: e.ID, Type: string(e.Type), Kind: payment.EventOther}
	if e.Type != stripe.EventTypePaymentIntentSucceeded && e.Type != stripe.EventTypePaymentIntentPaymentFailed {
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
