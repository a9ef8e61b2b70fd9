package server_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/oncepaytest"
	"github.com/oncepay/oncepay/internal/pgtest"
	"github.com/oncepay/oncepay/metrics"
	"github.com/oncepay/oncepay/outbound"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/pgstore"
	"github.com/oncepay/oncepay/provider/sim"
	"github.com/oncepay/oncepay/provider/stripe"
	"github.com/oncepay/oncepay/server"
	"github.com/oncepay/oncepay/sqlitestore"
	"github.com/oncepay/oncepay/workshop"
)

// env is a running oncepay: real SQLite files, the simulated provider, and
// real HTTP over a loopback socket.
type env struct {
	*oncepaytest.Env
	t       testing.TB
	pg      string // the PostgreSQL database's URL, with postgres
	Metrics *metrics.Metrics
	Inbox   *payment.Inbox
	// Deliverer sends the events to the merchants' endpoints, and the
	// admin page's "send again".
	Deliverer *payment.Deliverer
	Server    *httptest.Server
	Client    *http.Client
}

type envOptions struct {
	dir     string // reuse the files of an earlier env (a restart)
	auth    bool   // require merchant API keys (serve), else demo mode
	faults  sim.Faults
	now     func() time.Time
	lease   time.Duration
	storeOp sqlitestore.Options
	pgOp    pgstore.Options // with postgres
	// adminToken opens the admin surface in serve mode (auth); demo mode
	// leaves it open.
	adminToken string
	log        io.Writer // where the JSON logs go; discarded if nil
	workshop   bool      // serve the demo mode's workshop page
	postgres   bool      // keep the attempts in PostgreSQL (a database of the test's own), not SQLite
	// stripeWebhooks opens Stripe's webhook endpoint too, with its own
	// secret, while payments still go to the simulated provider: both
	// secrets set.
	stripeWebhooks bool
	// replica, if set, is the server's Replica.
	replica func() server.ReplicaStatus
}

// stores are the stores a test of store behaviour runs against, by name.
var stores = []struct {
	name     string
	postgres bool
}{{"sqlite", false}, {"postgres", true}}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	var pg string
	if o.postgres {
		pg = pgtest.URL(t)
	}
	oe := oncepaytest.Open(t, oncepaytest.Options{Dir: o.dir, Faults: o.faults, Now: o.now, Lease: o.lease, Store: o.storeOp, PGStore: o.pgOp, Log: o.log, Postgres: pg})
	m := metrics.New(oe.DB.InProgress, oe.Service.Now)
	m.Store(oe.DB)
	oe.Service.ObserveProviderCall = m.ProviderCall
	oe.Reconciler.Observe = m.Reconciled
	m.Offline(oe.DB.QueueTotals, nil, oe.Service.Now)
	oe.Service.ObserveQueue, oe.Forwarder.Observe = m.Queued, m.Forwarded
	m.Deliveries(oe.DB.DeliveryBacklog, oe.Service.Now)
	dlv, err := payment.NewDeliverer(payment.Deliverer{Store: oe.DB, Sender: outbound.New(outbound.Options{AllowInsecure: true}),
		Now: oe.Service.Now, Timeout: 2 * time.Second, Observe: m.Delivered})
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Payments: oe.Service, Sim: oe.Sim.Handler(), Log: oe.Log, Metrics: m.Handler(), CountRequest: m.Request,
		Admin: server.Admin{Store: oe.DB, Reconciler: oe.Reconciler, Queue: oe.DB, Forwarder: oe.Forwarder, Endpoints: oe.DB, Deliverer: dlv,
			Token: o.adminToken, Open: !o.auth}}
	inbox := payment.NewInbox(oe.DB, oe.Service, "sim", oe.Service.Lease)
	inbox.Observe, inbox.Refused = m.WebhookEvent, m.WebhookRefused
	cfg.Inbox, cfg.CountWebhook = inbox, m.WebhookEvent
	cfg.Webhooks = map[string]server.WebhookVerifier{"sim": func(h http.Header, body []byte) (payment.Event, error) {
		return sim.VerifyWebhook(simWebhookSecret, h, body, time.Now())
	}}
	if o.stripeWebhooks {
		cfg.Webhooks["stripe"] = func(h http.Header, body []byte) (payment.Event, error) {
			return stripe.VerifyWebhook(stripeWebhookSecret, h.Get("Stripe-Signature"), body)
		}
	}
	if o.auth {
		cfg.Keys = oe.DB
	}
	cfg.Replica = o.replica
	if o.workshop {
		cfg.Workshop = workshop.New(workshop.Config{Service: oe.Service, Reconciler: oe.Reconciler, Inbox: inbox, Forwarder: oe.Forwarder, Ledger: oe.Sim, Scope: server.DemoScope})
	}
	e := &env{Env: oe, t: t, pg: pg, Metrics: m, Inbox: inbox, Deliverer: dlv, Server: httptest.NewServer(server.New(cfg)),
		Client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}, Timeout: 30 * time.Second}}
	t.Cleanup(e.Close)
	return e
}

// Close stops the server and closes the files; safe to call twice.
func (e *env) Close() {
	e.Server.Close()
	e.Client.CloseIdleConnections()
	e.Env.Close()
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// problemType is the "type" of a problem+json body, "" for anything else.
func (r response) problemType() string {
	if r.Header.Get("Content-Type") != "application/problem+json" {
		return ""
	}
	var p payment.Problem
	json.Unmarshal(r.Body, &p)
	return p.Type
}

func (r response) payment(t testing.TB) payment.View {
	t.Helper()
	var v payment.View
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("payment body %q: %v", r.Body, err)
	}
	return v
}

// do sends one request. headers are name, value pairs.
func (e *env) do(method, path string, body []byte, headers ...string) response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.Server.URL+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := e.Client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// pay posts a JSON payment with key and any extra headers.
func (e *env) pay(key, body string, headers ...string) response {
	e.t.Helper()
	return e.do("POST", "/v1/payments", []byte(body), append([]string{"Idempotency-Key", key, "Content-Type", "application/json"}, headers...)...)
}

// ledger is the simulated provider's charges by idempotency key.
func (e *env) ledger() map[string][]payment.Charge { return e.Ledger(e.t) }

func (e *env) counts() map[payment.Status]int {
	e.t.Helper()
	c, err := e.DB.Counts(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// apiKey creates a merchant with one API key and returns its scope and the
// key's secret.
func (e *env) apiKey(name string) (scope, secret string) {
	e.t.Helper()
	scope, _, secret = e.Merchant(e.t, name)
	return scope, secret
}

// simWebhookSecret signs the simulated provider's events in these tests.
const simWebhookSecret = "whsec_c2VydmVyLXRlc3Qtc2VjcmV0LTAwMDA="

// stripeWebhookSecret signs Stripe's events in these tests.
const stripeWebhookSecret = "whsec_server_test_stripe_secret"

const visa = `{"amount":1000,"currency":"EUR","source":"tok_visa"}`

// whileLocked runs f while another connection holds the database's write
// lock, as another process would.
func whileLocked(t *testing.T, e *env, f func() response) response {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(e.Dir, "oncepay.db")+"?_pragma=busy_timeout(100)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(context.Background(), `ROLLBACK`)
	return f()
}
