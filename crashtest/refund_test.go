package crashtest

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// The refund crash test's shape: payments of refundCharge, each raced by
// refundKeys different refunds of 30% of it, so at most 3 of each fit.
const (
	refundCharge = 1000
	refundAmount = 300
	refundKeys   = 50
	// A refund passes a crash point only a few times per payment (about 3
	// claims, records and refunds), so the chance is higher than
	// crashProb's: a round kills within a payment or two.
	refundCrashProb = 0.5
	// A server that outlives this many raced payments has lost its crash point.
	maxRoundPayments = 10
)

// simLostRefunds is the standalone sim's knobs for the refund rounds: a
// third of its answers lost after refunding, and no dedupe by key, so the
// ledger shows any key oncepay refunded twice.
const simLostRefunds = `{"latency":"0s","fail_before_charge":0,"fail_after_charge":0.3,"fail_lookup":0,"no_dedupe":true}`

// SIGKILL of the server mid-refund, refundKills times at each crash point a
// refund passes, restarting after each kill, while 50 refund keys race on
// each payment and the provider loses a third of its answers. Then
// reconcile: per payment the provider's refunded total is oncepay's
// amount_refunded and never more than the charge, no key was refunded twice
// at the provider (which does not dedupe), nothing is in progress, and every
// final answer a client got is what its retry gets now.
func TestRefundCrashPoints(t *testing.T) {
	for _, point := range []string{"after-claim", "after-refund", "in-record", "after-record"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			kills := refundKills
			if testing.Short() {
				kills = 3
			}
			refundCrashRepeatedly(t, point, kills)
		})
	}
}

// refundIntent is one refund a client means to make once.
type refundIntent struct {
	*intent
	paymentID string
	refused   bool // answered 409 refund-exceeds-remaining: never claimed, not retried
}

// refundTally counts what the clients saw.
type refundTally struct {
	requests, lost, inProgress atomic.Int64
}

func refundCrashRepeatedly(t *testing.T, point string, kills int) {
	dir := t.TempDir()
	simProc, ledger := startSim(t, dir, 0, "--sim-dedupe=false")
	db := filepath.Join(dir, "oncepay.db")
	m := createAPIKey(t, db)
	c := newClient()

	// The payments, made before any crash point is armed: 3 for each kill
	// is far more than the rounds use.
	srv := startServe(t, db, simProc.url, fast, nil)
	payments := makePayments(t, c, srv.url, m, point, 3*kills)
	srv.kill(t)
	setSimFaults(t, simProc.url, simLostRefunds)

	var (
		intents   []*refundIntent
		tally     refundTally
		takeovers int
		raced     int // payments raced on
	)
	for killed := range kills {
		srv := startServe(t, db, simProc.url, fast, crashEnv(point, refundCrashProb))
		var wg sync.WaitGroup
		// Refunds left without a final answer by the last kill are retried
		// first, with their keys: they take over what the kill abandoned.
		for _, in := range intents {
			if in.final == nil && !in.refused {
				wg.Go(func() { refundUntilDead(t, c, srv, m, in, &tally) })
			}
		}
		for n := 0; ; n++ {
			if n == maxRoundPayments {
				t.Fatalf("server still running after %d raced payments: crash point %s never fired", n, point)
			}
			if raced == len(payments) {
				t.Fatalf("all %d payments raced on before kill %d at %s", raced, killed+1, point)
			}
			id := payments[raced]
			raced++
			for k := range refundKeys {
				in := &refundIntent{paymentID: id, intent: &intent{
					key:  fmt.Sprintf("refund-%s-%d", id, k),
					path: "/v1/payments/" + id + "/refunds",
					body: fmt.Sprintf(`{"amount":%d}`, refundAmount),
				}}
				intents = append(intents, in)
				wg.Go(func() { refundUntilDead(t, c, srv, m, in, &tally) })
			}
			wg.Wait()
			if dead(srv) || t.Failed() {
				break
			}
		}
		if !srv.exit(t, 10*time.Second) {
			t.Fatalf("server exited with %v, want SIGKILL at %s:\n%s", srv.err, point, srv.logs)
		}
		takeovers += strings.Count(srv.logs.String(), "took over abandoned attempt")
		if t.Failed() {
			t.FailNow()
		}
	}

	fast.expired()
	rec := reconcile(t, db, simProc.url, fast)
	if rec.unknown != 0 {
		t.Errorf("reconcile left %d unknown, want 0: the provider is healthy", rec.unknown)
	}
	checkBooks(t, db, ledger)
	rb := checkRefundBooks(t, db, ledger, m.scope)
	srv = startServe(t, db, simProc.url, fast, nil)
	kinds := checkRefundAnswers(t, c, srv.url, m, intents, rb)
	var answered, refused int
	for _, in := range intents {
		if in.final != nil {
			answered++
		}
		if in.refused {
			refused++
		}
	}
	t.Logf("%s: %d SIGKILLs; %d refund keys raced on %d payments of %d (each for %d); %d requests, %d answers lost (503), %d in progress (409); %d answered finally before a kill, %d refused as exceeding; %d claims taken over by a retry",
		point, kills, len(intents), raced, refundCharge, refundAmount, tally.requests.Load(), tally.lost.Load(), tally.inProgress.Load(), answered, refused, takeovers)
	t.Logf("%s: %v; %v; retries after: %v", point, rec, rb, kinds)
}

// dead reports whether c has exited.
func dead(c *child) bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// makePayments makes n succeeded payments of refundCharge and returns their ids.
func makePayments(t *testing.T, c *http.Client, base string, m merchant, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Retried as a client would: on a loaded machine a charge can
			// outlast the tests' 200 ms provider timeout (503), and its
			// retry then finds it.
			in := newIntent(fmt.Sprintf("%s-pay-%d", prefix, i), refundCharge, "tok_visa")
			payUntilFinal(t.Context(), t, c, func() string { return base }, m, in, time.Now().Add(30*time.Second))
			if in.final == nil || in.final.status != http.StatusCreated {
				t.Errorf("pay %s = %v; want 201", in.key, in.final)
				return
			}
			ids[i] = in.final.field("id")
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return ids
}

// refundUntilDead sends in to srv, retrying with its key on 409 in progress
// and 503 as docs/client.md tells a client to, until a final answer, a refusal, or
// no answer (the kill). It runs on its own goroutine, so it reports with
// Errorf.
func refundUntilDead(t *testing.T, c *http.Client, srv *child, m merchant, in *refundIntent, tally *refundTally) {
	for {
		tally.requests.Add(1)
		r, err := pay(c, srv.url, m, in.intent)
		switch {
		case err != nil: // the kill
			select {
			case <-srv.done:
			case <-time.After(5 * time.Second):
				t.Errorf("key %s: %v, but the server is still running", in.key, err)
			}
			return
		case r.status == http.StatusConflict && r.field("type") == payment.ProblemRefundExceeds:
			// Refused before the claim: nothing kept, so nothing to replay.
			if in.final != nil {
				t.Errorf("key %s: answer = %v, want the earlier final answer %v", in.key, r, *in.final)
			}
			in.refused = true
			return
		case r.status == http.StatusPaymentRequired && r.field("type") == payment.ProblemRefundDeclined:
			// The sim declines only a refund beyond what is left of the charge.
			t.Errorf("key %s: answer = %v: the provider refused, so oncepay sent more than was left", in.key, r)

			return
		case r.final():
			in.settle(t, r)
			return
		case !r.retryable():
			t.Errorf("key %s: answer = %v, want 201, 402, 409 refund-exceeds-remaining, or 409/503 with Retry-After", in.key, r)
			return
		case r.status == http.StatusServiceUnavailable:
			tally.lost.Add(1)
		default:
			tally.inProgress.Add(1)
		}
		time.Sleep(time.Duration(20+rand.IntN(30)) * time.Millisecond)
	}
}

// refundBooks are the refund sides that must agree: the provider's refunds
// by downstream key, and oncepay's refund attempts.
type refundBooks struct {
	refunds                            map[string]providerRefund // by downstream key: the first copy
	attempts                           map[string]attempt        // by downstream key; chargeID is the provider's refund id
	charged, refunded, oncepayRefunded int64
	payments                           int
}

type providerRefund struct {
	id, chargeID string
	amount       int64
}

func (b refundBooks) String() string {
	var succeeded, failed int
	for _, a := range b.attempts {
		switch a.status {
		case "succeeded":
			succeeded++
		case "failed":
			failed++
		}
	}
	return fmt.Sprintf("provider: %d refunds, %d refunded of %d charged on %d payments; oncepay: %d refunded, %d refunds succeeded, %d failed (not completed)",
		len(b.refunds), b.refunded, b.charged, b.payments, b.oncepayRefunded, succeeded, failed)
}

// checkRefundBooks reads the sim's refund ledger and oncepay's payments and
// refunds after every crash has been recovered from, and fails the test
// unless they agree: no key refunded twice at the provider; per payment the
// provider's refunded total equals amount_refunded, is at most the charge,
// and nothing stays reserved; every refund attempt is final, succeeded with
// the provider's refund (id and amount) under its key, or failed with none;
// every provider refund has its attempt.
func checkRefundBooks(t *testing.T, dbPath, ledgerPath, scope string) refundBooks {
	t.Helper()
	b := refundBooks{refunds: map[string]providerRefund{}, attempts: map[string]attempt{}}
	byCharge := map[string]int64{}
	ledger := openReadOnly(t, ledgerPath)
	defer ledger.Close()
	query(t, ledger, `SELECT idempotency_key, copy, id, charge_id, amount FROM sim_refunds ORDER BY copy`, func(rows *sql.Rows) error {
		var dk string
		var cp int
		var r providerRefund
		err := rows.Scan(&dk, &cp, &r.id, &r.chargeID, &r.amount)
		if cp > 0 {
			t.Errorf("downstream key %s: refunded again (copy %d, %s), want once", dk, cp, r.id)
		} else {
			b.refunds[dk] = r
		}
		byCharge[r.chargeID] += r.amount
		b.refunded += r.amount
		return err
	})

	db := openReadOnly(t, dbPath)
	defer db.Close()
	query(t, db, `SELECT id, coalesce(charge_id, ''), amount, amount_refunded, amount_reserved FROM payments`, func(rows *sql.Rows) error {
		var id, chargeID string
		var amount, refunded, reserved int64
		err := rows.Scan(&id, &chargeID, &amount, &refunded, &reserved)
		b.payments++
		b.charged += amount
		b.oncepayRefunded += refunded
		if got := byCharge[chargeID]; got != refunded || got > amount || reserved != 0 {
			t.Errorf("payment %s of %d: provider refunded %d, oncepay %d with %d reserved; want equal, at most the charge, none reserved",
				id, amount, got, refunded, reserved)
		}
		return err
	})
	query(t, db, `SELECT a.idempotency_key, a.status, coalesce(a.charge_id, ''), a.amount,
			r.status, coalesce(r.provider_refund_id, ''), r.amount
		FROM payment_attempts a JOIN refunds r ON r.id = a.id WHERE a.kind = 'refund'`, func(rows *sql.Rows) error {
		a := attempt{scope: scope}
		var rStatus, rProvider string
		var rAmount int64
		err := rows.Scan(&a.key, &a.status, &a.chargeID, &a.amount, &rStatus, &rProvider, &rAmount)
		dk := payment.RefundDownstreamKey(scope, a.key)
		b.attempts[dk] = a
		r, refunded := b.refunds[dk]
		switch {
		case rStatus != a.status || rProvider != a.chargeID || rAmount != a.amount:
			t.Errorf("refund key %s: attempt %s %s of %d, refund row %s %s of %d; want the same", a.key, a.status, a.chargeID, a.amount, rStatus, rProvider, rAmount)
		case a.status == "in_progress":
			t.Errorf("refund key %s: still in progress after recovery", a.key)
		case a.status == "succeeded" && (!refunded || r.id != a.chargeID || r.amount != a.amount):
			t.Errorf("refund key %s: succeeded as %s of %d, want the provider's refund under its key (%+v, found %v)", a.key, a.chargeID, a.amount, r, refunded)
		case a.status == "failed" && refunded:
			t.Errorf("refund key %s: failed, but the provider refunded it (%s)", a.key, r.id)
		}
		return err
	})
	for dk, r := range b.refunds {
		if _, ok := b.attempts[dk]; !ok {
			t.Errorf("provider refund %s has no refund attempt", r.id)
		}
	}
	return b
}

// checkRefundAnswers retries every refund that was claimed, twice, against
// a server with no crash point armed: the answer is what the books say (201
// naming the provider's refund if it has one under the key, else the stored
// 402 refund-not-completed), the same bytes as any final answer the client
// got before a crash, and the same bytes again. It returns how many answers
// were of each kind; a refund refused or never claimed is not sent again.
func checkRefundAnswers(t *testing.T, c *http.Client, base string, m merchant, intents []*refundIntent, b refundBooks) map[string]int {
	t.Helper()
	kinds := map[string]int{}
	for _, in := range intents {
		dk := payment.RefundDownstreamKey(m.scope, in.key)
		if _, claimed := b.attempts[dk]; !claimed {
			if in.final != nil {
				t.Errorf("refund key %s: answered %v, but no attempt holds it", in.key, *in.final)
			}
			if in.refused {
				kinds["refused"]++
			} else {
				kinds["never claimed"]++
			}
			continue
		}
		if in.refused {
			t.Errorf("refund key %s: refused as exceeding, but an attempt holds it", in.key)
		}
		first, second := mustPay(t, c, base, m, in.intent), mustPay(t, c, base, m, in.intent)
		if !second.same(first) || first.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("refund key %s: retries = %v then %v, want one stored answer, replayed", in.key, first, second)
		}
		if in.final != nil && !first.same(*in.final) {
			t.Errorf("refund key %s: retry = %v, want the final answer given before %v", in.key, first, *in.final)
		}
		if r, refunded := b.refunds[dk]; refunded {
			if first.status != http.StatusCreated || first.field("provider_refund_id") != r.id {
				t.Errorf("refund key %s: retry = %v, want 201 naming the provider's refund %s", in.key, first, r.id)
			}
			kinds["refunded"]++
		} else {
			wantProblem(t, first, http.StatusPaymentRequired, payment.ProblemRefundNotDone, false)
			kinds["not completed"]++
		}
	}
	return kinds
}
