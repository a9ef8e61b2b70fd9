package stripe_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/stripe"
)

// A Refund's events and a Dispute's are read into what the inbox asks the
// provider about: the refund by its metadata and Stripe's id, failed or
// made; the dispute by its id.
func TestVerifyWebhookRefundsAndDisputes(t *testing.T) {
	refund := func(status, reason string) string {
		return `{"id":"re_1","object":"refund","amount":500,"currency":"eur","status":"` + status + `","failure_reason":"` + reason + `",
			"payment_intent":"pi_1","created":1700000000,"metadata":{"oncepay_key":"oncepay_re_abc","oncepay_refund":"re_ONCE","oncepay_payment":"pay_1"}}`
	}
	failed := payment.Event{Provider: "stripe", ID: "evt_r", Kind: payment.EventRefundFailure, PaymentID: "pay_1", DownstreamKey: "oncepay_re_abc",
		RefundID: "re_ONCE", ProviderRefundID: "re_1", DeclineCode: "lost_or_stolen_card"}
	made := failed
	made.Kind, made.DeclineCode = payment.EventRefunded, ""
	canceled := failed
	canceled.DeclineCode = "refund_canceled"
	dispute := `{"id":"dp_1","object":"dispute","amount":1999,"currency":"eur","reason":"fraudulent","status":"needs_response","payment_intent":"pi_1","charge":"ch_1"}`
	for _, tc := range []struct {
		name, typ, object string
		want              payment.Event
	}{
		{"refund.failed", "refund.failed", refund("failed", "lost_or_stolen_card"), failed},
		{"charge.refund.updated, failed", "charge.refund.updated", refund("failed", "lost_or_stolen_card"), failed},
		{"refund.updated, canceled", "refund.updated", refund("canceled", ""), canceled},
		{"refund.created, succeeded", "refund.created", refund("succeeded", ""), made},
		{"charge.refund.updated, pending", "charge.refund.updated", refund("pending", ""), made},
		{"charge.dispute.created", "charge.dispute.created", dispute, payment.Event{Provider: "stripe", ID: "evt_r", Kind: payment.EventDisputed,
			Charge: payment.Charge{ID: "pi_1"}, Dispute: &payment.Dispute{ID: "dp_1", Status: "needs_response", Reason: "fraudulent", Amount: 1999}}},
	} {
		body := eventJSON("evt_r", tc.typ, tc.object)
		got, err := stripe.VerifyWebhook(whsec, signed(body, whsec, time.Now()), body)
		tc.want.Type = tc.typ
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: event = %+v (dispute %+v), %v; want %+v", tc.name, got, got.Dispute, err, tc.want)
		}
	}
}

// LookupDispute retrieves the dispute with its PaymentIntent expanded, and
// reads oncepay's payment from its metadata; one Stripe does not have is
// ErrNoDispute, and any other failure is not known.
func TestLookupDispute(t *testing.T) {
	var expanded []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/disputes/dp_1":
			for k, v := range r.URL.Query() {
				if strings.HasPrefix(k, "expand") {
					expanded = append(expanded, v...)
				}
			}
			w.Write([]byte(`{"id":"dp_1","object":"dispute","amount":1999,"currency":"eur","reason":"fraudulent","status":"lost",
				"payment_intent":{"id":"pi_1","object":"payment_intent","metadata":{"oncepay_payment":"pay_1","oncepay_key":"oncepay_abc"}}}`))
		case "/v1/disputes/dp_gone":
			w.WriteHeader(404)
			w.Write([]byte(`{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such dispute: 'dp_gone'"}}`))
		default:
			w.WriteHeader(500)
			w.Write([]byte(`{"error":{"type":"api_error","message":"boom"}}`))
		}
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, 0)
	ctx := context.Background()
	d, err := c.LookupDispute(ctx, "dp_1")
	want := payment.ProviderDispute{Dispute: payment.Dispute{ID: "dp_1", Status: "lost", Reason: "fraudulent", Amount: 1999},
		Currency: "EUR", ChargeID: "pi_1", PaymentID: "pay_1"}
	if err != nil || d != want {
		t.Errorf("LookupDispute = %+v, %v; want %+v", d, err, want)
	}
	if len(expanded) != 1 || expanded[0] != "payment_intent" {
		t.Errorf("expand = %v, want [payment_intent]", expanded)
	}
	if _, err := c.LookupDispute(ctx, "dp_gone"); !errors.Is(err, payment.ErrNoDispute) {
		t.Errorf("LookupDispute of a dispute Stripe lacks = %v, want ErrNoDispute", err)
	}
	if _, err := c.LookupDispute(ctx, "dp_boom"); err == nil || errors.Is(err, payment.ErrNoDispute) {
		t.Errorf("LookupDispute when Stripe fails = %v, want an unknown answer", err)
	}
}
