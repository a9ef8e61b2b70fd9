package client_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/oncepay/oncepay/client"
	"github.com/oncepay/oncepay/internal/oncepaytest"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
	"github.com/oncepay/oncepay/server"
)

// On a dead link, Pay returns the payment queued (202) at once, final, with
// no retry; List finds it among the queued; once forwarded, Get says
// succeeded, and the intent paid again still gets its 202, replayed.
func TestPayQueuedOffline(t *testing.T) {
	ctx := context.Background()
	e := oncepaytest.Open(t, oncepaytest.Options{Faults: sim.Faults{FailBeforeCharge: 1}})
	lim := payment.OfflineLimits{MaxAmount: 5000, MaxTotal: 10000, MaxAge: time.Hour}
	if err := e.DB.SetOfflineLimits(ctx, server.DemoScope, &lim); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(server.Config{Payments: e.Service, Log: e.Log}))
	t.Cleanup(srv.Close)
	c := &client.Client{BaseURL: srv.URL, Backoff: client.Backoff{Base: time.Millisecond, Attempts: 3}}
	intent := client.NewIntent(client.PaymentRequest{Amount: 1999, Currency: "EUR", Source: "tok_visa"})
	p, err := c.Pay(ctx, intent)
	if err != nil || p.Status != client.StatusQueued || p.Replayed {
		t.Fatalf("Pay on a dead link = %+v, %v; want queued, not replayed", p, err)
	}
	page, err := c.List(ctx, client.ListParams{Status: client.StatusQueued})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != p.ID || page.HasMore {
		t.Fatalf("List queued = %+v, %v; want %s alone", page, err, p.ID)
	}
	if err := e.Sim.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Forwarder.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, p.ID)
	if err != nil || got.Status != client.StatusSucceeded || got.ChargeID == "" {
		t.Errorf("Get after forwarding = %+v, %v; want succeeded with a charge", got, err)
	}
	again, err := c.Pay(ctx, intent)
	if err != nil || again.Status != client.StatusQueued || !again.Replayed {
		t.Errorf("Pay again = %+v, %v; want the 202 replayed", again, err)
	}
	if page, err := c.List(ctx, client.ListParams{Status: client.StatusQueued}); err != nil || len(page.Data) != 0 {
		t.Errorf("List queued after forwarding = %+v, %v; want none", page, err)
	}
	if _, err := c.List(ctx, client.ListParams{Limit: 1000}); err == nil {
		t.Error("List with limit 1000: no error, want the server's 400")
	}
}
