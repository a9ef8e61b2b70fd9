package crashtest

import (
	"bytes"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

// SIGKILL between receiving a provider event and applying it (in-event),
// or between applying it and finishing it (after-apply); then the provider
// redelivers to a restarted server: the event is applied exactly once, the
// payment it settles is the ledger's, and the client's retry replays it.
// The event's "settled" attempt is taken over once: its fence tells.
func TestWebhookCrash(t *testing.T) {
	for _, point := range []string{"in-event", "after-apply"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			rounds := webhookKills
			if testing.Short() {
				rounds = 3
			}
			webhookCrashRounds(t, point, rounds)
		})
	}
}

func webhookCrashRounds(t *testing.T, point string, rounds int) {
	dir := t.TempDir()
	simProc, ledger := startSim(t, dir, 0)
	db := filepath.Join(dir, "oncepay.db")
	m := createAPIKey(t, db)
	c := newClient()
	secret := sim.NewWebhookSecret()
	flags := []string{"--sim-webhook-secret", secret, "--reconcile-schedule", "off", "--webhook-sweep-schedule", "off"}
	kills := 0
	for i := range rounds {
		in := newIntent(fmt.Sprintf("%s-%d", point, i), 100+i, "tok_visa")
		srv := startServe(t, db, simProc.url, slowBank, crashEnv(point, 1), flags...)
		setSimFaults(t, simProc.url, `{"latency":"0s","fail_before_charge":0,"fail_after_charge":1,"fail_lookup":0}`)
		r := mustPay(t, c, srv.url, m, in)
		setSimFaults(t, simProc.url, `{"latency":"0s","fail_before_charge":0,"fail_after_charge":0,"fail_lookup":0}`)
		if r.status != http.StatusServiceUnavailable {
			t.Fatalf("%s: pay = %v, want 503 (the answer lost)", in.key, r)
		}
		dk := payment.DownstreamKey(m.scope, in.key)
		body := chargeEvent(t, db, ledger, m.scope, in.key)

		if _, err := postEvent(c, srv.url, secret, "msg_"+dk[8:32], body); err == nil {
			t.Fatalf("%s: the event was answered; want the server killed at %s", in.key, point)
		}
		if !srv.exit(t, 10*time.Second) {
			t.Fatalf("server exited with %v, want SIGKILL at %s:\n%s", srv.err, point, srv.logs)
		}
		kills++

		// The provider redelivers, signed anew, once the dead processor's
		// lease has run out.
		srv = startServe(t, db, simProc.url, slowBank, nil, flags...)
		slowBank.expired()
		got, err := postEvent(c, srv.url, secret, "msg_"+dk[8:32], body)
		if err != nil || got.status != http.StatusOK || got.field("state") != "processed" {
			t.Fatalf("%s: redelivery = %v, %v; want 200 processed", in.key, got, err)
		}
		retry := mustPay(t, c, srv.url, m, in)
		if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s: retry = %v, want a 201 replay", in.key, retry)
		}
		checkSettledOnce(t, db, m.scope, in.key, point)
		srv.kill(t)
	}
	b := checkBooks(t, db, ledger)
	t.Logf("%s: %d kills, %d events redelivered and applied once; %s", point, kills, rounds, b)
}

// chargeEvent is the sim's charge.succeeded body for the ledger's charge
// under (scope, key), naming the attempt's payment id.
func chargeEvent(t *testing.T, dbPath, ledgerPath, scope, key string) []byte {
	t.Helper()
	dk := payment.DownstreamKey(scope, key)
	d := openReadOnly(t, dbPath)
	defer d.Close()
	var paymentID string
	if err := d.QueryRow(`SELECT id FROM payment_attempts WHERE scope = ? AND idempotency_key = ?`, scope, key).Scan(&paymentID); err != nil {
		t.Fatal(err)
	}
	l := openReadOnly(t, ledgerPath)
	defer l.Close()
	var chargeID, currency string
	var amount int64
	if err := l.QueryRow(`SELECT id, amount, currency FROM sim_charges WHERE idempotency_key = ?`, dk).Scan(&chargeID, &amount, &currency); err != nil {
		t.Fatal(err)
	}
	return fmt.Appendf(nil, `{"type":"charge.succeeded","timestamp":"2026-01-01T00:00:00Z","data":{"id":%q,"idempotency_key":%q,"payment_id":%q,"amount":%d,"currency":%q,"created_at":"2026-01-01T00:00:00Z"}}`,
		chargeID, dk, paymentID, amount, currency)
}

// checkSettledOnce: the attempt was taken over exactly once (claim fence 1,
// the event's takeover 2) and the event ended processed after two tries,
// the dead one and the redelivery.
func checkSettledOnce(t *testing.T, dbPath, scope, key, point string) {
	t.Helper()
	d := openReadOnly(t, dbPath)
	defer d.Close()
	var fence, tries int
	var status, state, result string
	if err := d.QueryRow(`SELECT fence, status FROM payment_attempts WHERE scope = ? AND idempotency_key = ?`, scope, key).Scan(&fence, &status); err != nil {
		t.Fatal(err)
	}
	if err := d.QueryRow(`SELECT attempts, state, result FROM webhook_events WHERE payment_id = (
		SELECT id FROM payment_attempts WHERE scope = ? AND idempotency_key = ?)`, scope, key).Scan(&tries, &state, &result); err != nil {
		t.Fatal(err)
	}
	want := "settled succeeded" // the dead try never applied it
	if point == "after-apply" {
		want = "already succeeded" // the dead try applied it; the redelivery found it done
	}
	if fence != 2 || status != "succeeded" || tries != 2 || state != "processed" || result != want {
		t.Errorf("%s: attempt fence %d %s, event %s after %d tries (%q); want fence 2 succeeded, processed after 2 (%q)",
			key, fence, status, state, tries, result, want)
	}
}

func postEvent(c *http.Client, base, secret, id string, body []byte) (reply, error) {
	h, err := sim.SignWebhook(secret, id, time.Now(), body)
	if err != nil {
		return reply{}, err
	}
	req, err := http.NewRequest(http.MethodPost, base+"/v1/webhooks/sim", bytes.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: buf.Bytes()}, nil
}

// setSimFaults sets the standalone sim's fault knobs.
func setSimFaults(t *testing.T, simURL, faults string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, simURL+"/sim/faults", strings.NewReader(faults))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /sim/faults = %d", resp.StatusCode)
	}
}
