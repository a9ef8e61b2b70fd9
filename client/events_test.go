package client_test

import (
	"context"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/oncepay/oncepay/client"
	"github.com/oncepay/oncepay/internal/oncepaytest"
	"github.com/oncepay/oncepay/server"
)

// Events pages the merchant's events newest first, by type or all, either
// way; each names the payment or refund it is about, as it was then.
func TestEvents(t *testing.T) {
	ctx := context.Background()
	e := oncepaytest.Open(t, oncepaytest.Options{})
	srv := httptest.NewServer(server.New(server.Config{Payments: e.Service, Log: e.Log}))
	t.Cleanup(srv.Close)
	c := &client.Client{BaseURL: srv.URL, Backoff: client.Backoff{Base: time.Millisecond, Attempts: 3}}
	paid, err := c.Pay(ctx, client.NewIntent(client.PaymentRequest{Amount: 1999, Currency: "EUR", Source: "tok_visa"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pay(ctx, client.NewIntent(client.PaymentRequest{Amount: 500, Currency: "EUR", Source: "tok_chargeDeclined"})); !client.IsDeclined(err) {
		t.Fatalf("Pay with a declined card = %v, want declined", err)
	}
	refund, err := c.Refund(ctx, client.NewRefundIntent(paid.ID, client.RefundRequest{Amount: 100}))
	if err != nil {
		t.Fatal(err)
	}
	all, err := c.Events(ctx, client.EventListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range all.Data {
		types = append(types, ev.Type)
	}
	if want := []string{client.EventRefundSucceeded, client.EventPaymentFailed, client.EventPaymentSucceeded}; !slices.Equal(types, want) || all.HasMore {
		t.Fatalf("Events = %v (has more %v), want %v", types, all.HasMore, want)
	}
	if r, err := all.Data[0].Refund(); err != nil || r.ID != refund.ID || r.Status != "succeeded" {
		t.Errorf("the refund event's refund = %+v, %v, want %s succeeded", r, err, refund.ID)
	}
	if p, err := all.Data[2].Payment(); err != nil || p.ID != paid.ID || p.Status != client.StatusSucceeded || p.AmountRefunded != 0 {
		t.Errorf("the payment event's payment = %+v, %v, want %s succeeded as it was, before its refund", p, err, paid.ID)
	}
	if _, err := all.Data[0].Payment(); err == nil {
		t.Error("Payment() of a refund event: no error")
	}
	page, err := c.Events(ctx, client.EventListParams{Limit: 1, StartingAfter: all.Data[0].ID})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != all.Data[1].ID || !page.HasMore {
		t.Errorf("the page after the newest = %+v, %v, want the second alone, more after it", page, err)
	}
	newer, err := c.Events(ctx, client.EventListParams{EndingBefore: all.Data[2].ID})
	if err != nil || len(newer.Data) != 2 || newer.Data[0].ID != all.Data[0].ID {
		t.Errorf("the events after the oldest = %+v, %v, want the two newer, newest first", newer, err)
	}
	failed, err := c.Events(ctx, client.EventListParams{Type: client.EventPaymentFailed})
	if err != nil || len(failed.Data) != 1 || failed.Data[0].ID != all.Data[1].ID {
		t.Errorf("Events of payment.failed = %+v, %v, want the decline's", failed, err)
	}
	if _, err := c.Events(ctx, client.EventListParams{Type: "charge.succeeded"}); err == nil {
		t.Error("Events of an unknown type: no error, want the server's 400")
	}
}
