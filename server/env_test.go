package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/oncepay/oncepay/metrics"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
	"github.com/oncepay/oncepay/server"
	"github.com/oncepay/oncepay/sqlitestore"
	"github.com/oncepay/oncepay/workshop"
)

// env is a running oncepay: real SQLite files, the simulated provider, and
// real HTTP over a loopback socket.
type env struct {
	t       testing.TB
	dir     string
	DB      *sqlitestore.DB
	Sim     *sim.Sim
	Metrics *metrics.Metrics
	Service *payment.Service
	Server  *httptest.Server
	Client  *http.Client
}

type envOptions struct {
	dir     string // reuse the files of an earlier env (a restart)
	auth    bool   // require merchant API keys (serve), else demo mode
	faults  sim.Faults
	now     func() time.Time
	lease   time.Duration
	storeOp sqlitestore.Options
	// adminToken opens the admin surface in serve mode (auth); demo mode
	// leaves it open.
	adminToken string
	log        io.Writer // where the JSON logs go; discarded if nil
	workshop   bool      // serve the demo mode's workshop page
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	if o.dir == "" {
		o.dir = t.TempDir()
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.lease == 0 {
		o.lease = 30 * time.Second
	}
	schema, err := os.ReadFile("../schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db, err := sqlitestore.Open(ctx, filepath.Join(o.dir, "oncepay.db"), string(schema), o.storeOp)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	s, err := sim.Open(filepath.Join(o.dir, "sim.db"))
	if err != nil {
		t.Fatalf("open sim: %v", err)
	}
	if err := s.SetFaults(o.faults); err != nil {
		t.Fatal(err)
	}
	if o.log == nil {
		o.log = io.Discard
	}
	log := slog.New(slog.NewJSONHandler(o.log, nil))
	m := metrics.New(db.InProgress, o.now)
	svc := &payment.Service{Store: db, Provider: s, Log: log, Now: o.now, ProviderTimeout: 5 * time.Second, Lease: o.lease,
		ObserveProviderCall: m.ProviderCall}
	rec := &payment.Reconciler{Service: svc, StaleAfter: 5 * time.Minute, Limit: 100}
	cfg := server.Config{Payments: svc, Sim: s.Handler(), Log: log, Metrics: m.Handler(), CountRequest: m.Request,
		Admin: server.Admin{Store: db, Reconciler: rec, Token: o.adminToken, Open: !o.auth}}
	if o.auth {
		cfg.Keys = db
	}
	if o.workshop {
		cfg.Workshop = workshop.New(svc, rec, s, server.DemoScope)
	}
	srv := httptest.NewServer(server.New(cfg))
	e := &env{t: t, dir: o.dir, DB: db, Sim: s, Metrics: m, Service: svc, Server: srv,
		Client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}, Timeout: 30 * time.Second}}
	t.Cleanup(e.Close)
	return e
}

// Close stops the server and closes the files; safe to call twice.
func (e *env) Close() {
	if e.Server == nil {
		return
	}
	e.Server.Close()
	e.Client.CloseIdleConnections()
	e.DB.Close()
	e.Sim.Close()
	e.Server = nil
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
func (e *env) ledger() map[string][]payment.Charge {
	e.t.Helper()
	charges, err := e.Sim.Charges(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	m := map[string][]payment.Charge{}
	for _, c := range charges {
		m[c.IdempotencyKey] = append(m[c.IdempotencyKey], c)
	}
	return m
}

func (e *env) counts() map[payment.Status]int {
	e.t.Helper()
	c, err := e.DB.Counts(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// apiKey creates a merchant API key and returns its scope and secret.
func (e *env) apiKey(name string) (scope, secret string) {
	e.t.Helper()
	k, secret, err := e.DB.CreateAPIKey(context.Background(), name, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return k.ID, secret
}

const visa = `{"amount":1000,"currency":"EUR","source":"tok_visa"}`
