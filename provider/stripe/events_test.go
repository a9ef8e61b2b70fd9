package stripe_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v85/webhook"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/stripe"
)

const whsec = "whsec_test_secret"

// eventJSON is a Stripe event envelope around a PaymentIntent, in an API
// version other than the SDK's, as an endpoint pinned to an older version
// receives it.
func eventJSON(id, typ, intent string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2020-08-27","created":1700000000,
		"livemode":false,"pending_webhooks":1,"type":%q,"data":{"object":%s}}`, id, typ, intent)
}

const succeededIntent = `{"id":"pi_1","object":"payment_intent","amount":1999,"currency":"eur","status":"succeeded",
	"created":1700000000,"metadata":{"oncepay_key":"oncepay_abc","oncepay_payment":"pay_1"}}`

const failedIntent = `{"id":"pi_2","object":"payment_intent","amount":1999,"currency":"eur","status":"requires_payment_method",
	"created":1700000000,"metadata":{"oncepay_key":"oncepay_def","oncepay_payment":"pay_2"},
	"last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds","message":"Your card has insufficient funds."}}`

func signed(body []byte, secret string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at}).Header
}

func TestVerifyWebhook(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name string
		body []byte
		want payment.Event
	}{
		{"succeeded", eventJSON("evt_1", "payment_intent.succeeded", succeededIntent), payment.Event{
			Provider: "stripe", ID: "evt_1", Type: "payment_intent.succeeded", Kind: payment.EventSucceeded,
			PaymentID: "pay_1", DownstreamKey: "oncepay_abc",
			Charge: payment.Charge{ID: "pi_1", IdempotencyKey: "oncepay_abc", Amount: 1999, Currency: "EUR", CreatedAt: time.Unix(1700000000, 0).UTC()},
		}},
		{"payment failed", eventJSON("evt_2", "payment_intent.payment_failed", failedIntent), payment.Event{
			Provider: "stripe", ID: "evt_2", Type: "payment_intent.payment_failed", Kind: payment.EventFailed,
			PaymentID: "pay_2", DownstreamKey: "oncepay_def", DeclineCode: "insufficient_funds", DeclineReason: "Your card has insufficient funds.",
		}},
		{"other type", eventJSON("evt_3", "customer.created", `{"id":"cus_1","object":"customer"}`), payment.Event{
			Provider: "stripe", ID: "evt_3", Type: "customer.created", Kind: payment.EventOther,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := stripe.VerifyWebhook(whsec, signed(tc.body, whsec, now), tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("event = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestVerifyWebhookRefuses(t *testing.T) {
	now := time.Now()
	body := eventJSON("evt_1", "payment_intent.succeeded", succeededIntent)
	old := signed(body, whsec, now.Add(-time.Hour))
	// The old delivery's signature with a fresh timestamp put in front.
	_, sig, _ := strings.Cut(old, ",")
	replayed := fmt.Sprintf("t=%d,%s", now.Unix(), sig)
	other := eventJSON("evt_9", "payment_intent.succeeded", strings.Replace(succeededIntent, "1999", "1", 1))
	for name, tc := range map[string]struct {
		header string
		body   []byte
	}{
		"no header":                  {"", body},
		"malformed header":           {"v1=abc", body},
		"wrong secret":               {signed(body, "whsec_other", now), body},
		"stale timestamp":            {old, body},
		"timestamp an hour ahead":    {signed(body, whsec, now.Add(time.Hour)), body},
		"timestamp 6 minutes ahead":  {signed(body, whsec, now.Add(6*time.Minute)), body},
		"old body, fresh timestamp":  {replayed, body},
		"signature of another body":  {signed(other, whsec, now), body},
		"body changed after signing": {signed(body, whsec, now), append(append([]byte{}, body...), ' ')},
		"signature of an empty body": {signed(nil, whsec, now), body},
		"secret of another endpoint": {signed(body, whsec+"x", now), body},
	} {
		if _, err := stripe.VerifyWebhook(whsec, tc.header, tc.body); !errors.Is(err, stripe.ErrBadSignature) {
			t.Errorf("%s: err = %v, want ErrBadSignature", name, err)
		}
	}
}

// A clock a little behind Stripe's still verifies: the tolerance holds
// both ways.
func TestVerifyWebhookTimestampAheadWithinTolerance(t *testing.T) {
	body := eventJSON("evt_1", "payment_intent.succeeded", succeededIntent)
	if _, err := stripe.VerifyWebhook(whsec, signed(body, whsec, time.Now().Add(4*time.Minute)), body); err != nil {
		t.Errorf("timestamp 4 minutes ahead: %v, want it verified", err)
	}
}

// A thin event notification (Stripe's v2 events) is signed like any other:
// it verifies, and is refused for what it is, not as a bad signature.
func TestVerifyWebhookThinEvent(t *testing.T) {
	thin := []byte(`{"id":"evt_test_65R9Ijk8Ux7Ns3p4XdP16RBLHnQ8ZKgG5dJ1SLsr4QM3Yf","object":"v2.core.event",
		"type":"v1.billing.meter.error_report_triggered","livemode":false,"created":"2024-09-17T06:20:52.246Z",
		"related_object":{"id":"mtr_test_61R9IjkvzkeEfcBgi41IaRLOqGyOHCz8","type":"billing.meter","url":"/v1/billing/meters/mtr_test_61R9IjkvzkeEfcBgi41IaRLOqGyOHCz8"}}`)
	_, err := stripe.VerifyWebhook(whsec, signed(thin, whsec, time.Now()), thin)
	if errors.Is(err, stripe.ErrBadSignature) || payment.ErrorCode(err) != payment.EINVALID {
		t.Fatalf("thin event: err = %v, want an EINVALID error, not a bad signature", err)
	}
	if msg := payment.ErrorMessage(err); !strings.Contains(msg, "thin event notification") || !strings.Contains(msg, "signature verified") {
		t.Errorf("message = %q, want it to say the signature verified and the thin event is not read", msg)
	}
	// Unsigned, it is still a bad signature first.
	if _, err := stripe.VerifyWebhook(whsec, signed(thin, "whsec_other", time.Now()), thin); !errors.Is(err, stripe.ErrBadSignature) {
		t.Errorf("thin event with another secret: err = %v, want ErrBadSignature", err)
	}
}

// The PaymentIntent of stripe-mock's fixtures, in an event signed with
// stripe-go's own test helper.
func TestVerifyWebhookStripeMockFixture(t *testing.T) {
	url := stripeMock(t)
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/payment_intents/pi_123", nil)
	req.SetBasicAuth("sk_test_123", "")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	intent, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var pi struct {
		ID     string `json:"id"`
		Amount int64  `json:"amount"`
	}
	if err := json.Unmarshal(intent, &pi); err != nil || pi.ID == "" {
		t.Fatalf("stripe-mock's PaymentIntent %q: %v", intent, err)
	}
	body := eventJSON("evt_mock", "payment_intent.succeeded", string(intent))
	ev, err := stripe.VerifyWebhook(whsec, signed(body, whsec, time.Now()), body)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Kind != payment.EventSucceeded || ev.Charge.ID != pi.ID || ev.Charge.Amount != pi.Amount {
		t.Errorf("event = %+v, want the fixture's intent %s of %d", ev, pi.ID, pi.Amount)
	}
}
