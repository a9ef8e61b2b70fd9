package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// scrape returns the samples of /metrics by name and labels, such as
// `oncepay_payment_requests_total{outcome="created"}`.
func (e *env) scrape(headers ...string) map[string]float64 {
	e.t.Helper()
	r := e.do("GET", "/metrics", nil, headers...)
	if r.Status != 200 {
		e.t.Fatalf("GET /metrics = %d", r.Status)
	}
	samples := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(r.Body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, _ := strconv.ParseFloat(line[i+1:], 64)
		samples[line[:i]] = v
	}
	return samples
}

// The writer's metrics count its transactions and the writes they held: a
// new payment is two (its claim, then its record, each committed before
// the client hears of it), a replay none.
func TestMetricsWriter(t *testing.T) {
	e := newEnv(t, envOptions{auth: true, adminToken: "admin-tok"})
	_, secret := e.apiKey("shop")
	auth := []string{"Authorization", "Bearer " + secret}
	admin := []string{"Authorization", "Bearer admin-tok"}
	writer := func() (commits, writes, queued float64) {
		m := e.scrape(admin...)
		for _, name := range []string{"oncepay_store_commits_total", "oncepay_store_writes_total", "oncepay_store_writes_queued"} {
			if _, ok := m[name]; !ok {
				t.Fatalf("no %s in /metrics", name)
			}
		}
		return m["oncepay_store_commits_total"], m["oncepay_store_writes_total"], m["oncepay_store_writes_queued"]
	}
	c0, w0, _ := writer()
	if r := e.pay("writer-1", visa, auth...); r.Status != 201 {
		t.Fatalf("pay = %d %s", r.Status, r.Body)
	}
	c1, w1, _ := writer()
	if c1-c0 != 2 || w1-w0 != 2 {
		t.Errorf("a new payment: +%v commits, +%v writes; want 2 and 2 (claim, record)", c1-c0, w1-w0)
	}
	if r := e.pay("writer-1", visa, auth...); r.Status != 201 {
		t.Fatalf("replay = %d %s", r.Status, r.Body)
	}
	c2, w2, q := writer()
	if c2 != c1 || w2 != w1 || q != 0 {
		t.Errorf("a replay: +%v commits, +%v writes, %v queued; want none", c2-c1, w2-w1, q)
	}
	var wg sync.WaitGroup
	statuses := make([]int, 20)
	for i := range statuses {
		wg.Go(func() { statuses[i] = e.pay(fmt.Sprint("writer-many-", i), visa, auth...).Status })
	}
	wg.Wait()
	for i, status := range statuses {
		if status != 201 {
			t.Fatalf("payment %d = %d, want 201", i, status)
		}
	}
	c3, w3, _ := writer()
	if w3-w2 != 40 || c3-c2 < 1 {
		t.Errorf("20 payments at once: +%v commits, +%v writes; want 40 writes in at least one commit", c3-c2, w3-w2)
	}
}

// A scripted sequence of requests moves each metric as documented, and no
// log line holds a secret.
func TestMetricsAndLogs(t *testing.T) {
	logs := &syncBuffer{}
	e := newEnv(t, envOptions{auth: true, adminToken: "admin-tok", log: logs})
	_, secret := e.apiKey("shop")
	auth := []string{"Authorization", "Bearer " + secret}
	const key = "order-7f3a9c-secret-key"
	admin := []string{"Authorization", "Bearer admin-tok"}

	if r := e.do("GET", "/metrics", nil, auth...); r.Status != 401 {
		t.Errorf("/metrics with a merchant key = %d, want 401", r.Status)
	}
	e.pay(key, visa, auth...)                                                // created
	e.pay(key, visa, auth...)                                                // replayed
	e.pay(key, `{"amount":1,"currency":"EUR","source":"tok_visa"}`, auth...) // key_reused
	e.pay("declined-1", `{"amount":500,"currency":"EUR","source":"tok_chargeDeclined"}`, auth...)
	e.pay("bad-1", `{"amount":-1}`, auth...) // bad_request
	e.pay("unauth-1", visa)                  // unauthorized
	e.Sim.SetFaults(sim.Faults{FailAfterCharge: 1})
	e.pay("lost-1", visa, auth...) // outcome_unknown, left in progress
	e.Sim.SetFaults(sim.Faults{Latency: 300 * time.Millisecond})
	done := make(chan response)
	go func() { done <- e.pay("slow-1", visa, auth...) }()
	for {
		if a, err := e.DB.Attempt(context.Background(), mustScope(t, e, secret), "slow-1"); err == nil && a.Status == payment.InProgress {
			break
		}
		time.Sleep(time.Millisecond)
	}
	e.pay("slow-1", visa, auth...) // in_progress
	<-done

	m := e.scrape(admin...)
	for outcome, want := range map[string]float64{
		"created": 2, "replayed": 1, "key_reused": 1, "declined": 1, "bad_request": 1,
		"unauthorized": 1, "outcome_unknown": 1, "in_progress": 1,
	} {
		if got := m[`oncepay_payment_requests_total{outcome="`+outcome+`"}`]; got != want {
			t.Errorf("requests{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
	for series, want := range map[string]float64{
		`oncepay_provider_call_duration_seconds_count{op="charge",result="succeeded"}`: 2,
		`oncepay_provider_call_duration_seconds_count{op="charge",result="declined"}`:  1,
		`oncepay_provider_call_duration_seconds_count{op="charge",result="unknown"}`:   1,
		`oncepay_attempts_in_progress`: 1,
		// The replay read the answer from the table and kept it; the reuse
		// of the key with another body was refused from memory.
		`oncepay_replay_cache_fills_total`: 1,
		`oncepay_replay_cache_hits_total`:  1,
	} {
		if got := m[series]; got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if m["oncepay_replay_cache_bytes"] <= 0 {
		t.Errorf("replay cache bytes = %v, want > 0: it holds the replayed answer", m["oncepay_replay_cache_bytes"])
	}
	if m["oncepay_attempt_in_progress_oldest_age_seconds"] <= 0 {
		t.Errorf("oldest in-progress age = %v, want > 0", m["oncepay_attempt_in_progress_oldest_age_seconds"])
	}
	if _, ok := m["go_goroutines"]; !ok {
		t.Errorf("no Go runtime metrics")
	}

	// Reconcile and purge runs are counted by the jobs themselves, however
	// they are started (cron, the admin page, the workshop).
	rec, err := payment.NewReconciler(payment.Reconciler{Service: e.Service, StaleAfter: time.Nanosecond, Limit: 10, Observe: e.Metrics.Reconciled})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rec.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	purger, err := payment.NewPurger(payment.Purger{Store: e.DB, Now: func() time.Time { return time.Now().Add(48 * time.Hour) },
		Retention: 24 * time.Hour, BatchSize: 2, Observe: e.Metrics.Purged})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := purger.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	m = e.scrape(admin...)
	if got := m[`oncepay_reconcile_attempts_total{outcome="succeeded"}`]; got != 1 {
		t.Errorf("reconcile succeeded = %v, want 1 (the lost response was charged)", got)
	}
	if got := m[`oncepay_replay_cache_bytes`]; got != 0 {
		t.Errorf("replay cache holds %v bytes after the purge, want 0", got)
	}
	if got := m[`oncepay_purge_deleted_total`]; got != 4 {
		t.Errorf("purge deleted = %v, want 4 (every final attempt: created, declined, slow, reconciled)", got)
	}

	// One JSON line per request, with an id and an outcome, and no secret.
	out := logs.String()
	for _, secretish := range []string{secret, key, "tok_visa", "tok_chargeDeclined", "admin-tok"} {
		if strings.Contains(out, secretish) {
			t.Errorf("logs contain %q", secretish)
		}
	}
	var requests int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %s", line)
		}
		if rec["msg"] == "request" {
			requests++
			if rec["request_id"] == "" || rec["outcome"] == "" {
				t.Errorf("request line lacks id or outcome: %s", line)
			}
		}
	}
	if requests < 10 {
		t.Errorf("request log lines = %d, want one per request", requests)
	}
	if !strings.Contains(out, `"key_hash":"`) || !strings.Contains(out, `"merchant":"mer_`) {
		t.Errorf("request lines lack key_hash or merchant")
	}
}

func mustScope(t *testing.T, e *env, secret string) string {
	t.Helper()
	scope, err := e.DB.Authenticate(context.Background(), secret)
	if err != nil {
		t.Fatal(err)
	}
	return scope
}
