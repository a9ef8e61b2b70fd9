// How the crash points are hooked in.
//
// The binary under test is built with "go build -tags crashpoints" (TestMain
// does it once). Under that tag internal/crashpoint.Hit kills the process
// with SIGKILL (no deferred function, no flush: a power cut, the OOM killer)
// when the environment arms its point:
//
//	ONCEPAY_CRASH_POINT  after-claim   the claim is committed, the provider not yet called
//	                     after-charge  the provider charged, nothing recorded yet
//	                     after-refund  the provider refunded, nothing recorded yet
//	                     in-record     the record's UPDATE and its event's INSERT ran, their transaction not committed
//	                     after-record  the record is committed, the client not yet answered
//	                     in-event      a provider event is stored and begun, not yet applied
//	                     after-apply   the event settled its attempt, the event not yet finished
//	                     after-delivery-claim  a delivery of a merchant's event claimed, not yet sent
//	                     after-delivery-send   sent, how it ended not yet stored
//	ONCEPAY_CRASH_PROB   chance (0..1, default 1) that one pass through the point kills
//
// A normal build (no tag) compiles Hit to nothing and ignores the variables.
// The standalone sim-provider keeps the ledger in its own process and file,
// so what the bank saw survives every kill; after the last one the tests
// run "oncepay reconcile" and check the ledger against the database.

package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// crashProb is the chance a crash point kills at each pass: low enough
// that some payments finish (and their answers must survive the next
// kill), high enough that every round ends in a kill.
const crashProb = 0.25

// Each round pays with crashWorkers clients at once; a server that answers
// maxRoundRequests requests without dying has lost its crash point.
const (
	crashWorkers     = 8
	maxRoundRequests = 400
)

// SIGKILL at each crash point, killsPerPoint times, restarting after each
// kill; then reconcile, and the ledger, the database and every client's
// retry must agree. The provider charges every call it gets (no dedupe), so
// the ledger holds one charge per key only if oncepay never charged a key
// twice. (It may have called twice: a call in flight when its server died
// can die unanswered and uncharged, and the retry then charges.)
func TestCrashPoints(t *testing.T) {
	for _, point := range []string{"after-claim", "after-charge", "in-record", "after-record"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			kills := killsPerPoint
			if testing.Short() {
				kills = 10
			}
			crashRepeatedly(t, point, kills)
		})
	}
}

func crashRepeatedly(t *testing.T, point string, kills int) {
	dir := t.TempDir()
	sim, ledger := startSim(t, dir, 0, "--sim-dedupe=false")
	db := filepath.Join(dir, "oncepay.db")
	m := createAPIKey(t, db)
	c := newClient()

	var intents []*intent // every intent sent, oldest first
	requests, takeovers := 0, 0
	for range kills {
		// Intents still without a final answer go first once their owner's
		// lease has run out: their retries take over the claims a kill
		// abandoned, and may die doing so.
		var pending []*intent
		for _, in := range intents {
			if in.final == nil && time.Since(in.sent) > fast.lease {
				pending = append(pending, in)
			}
		}
		var mu sync.Mutex
		next := func() *intent {
			mu.Lock()
			defer mu.Unlock()
			if len(pending) > 0 {
				in := pending[0]
				pending = pending[1:]
				return in
			}
			in := newIntent(fmt.Sprintf("%s-%d", point, len(intents)), 100+len(intents), "tok_visa")
			intents = append(intents, in)
			return in
		}
		srv := startServe(t, db, sim.url, fast, crashEnv(point, crashProb))
		n := crashRound(t, srv, c, m, next)
		requests += n
		select {
		case <-srv.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("server still running after %d requests: crash point %s never fired", n, point)
		}
		if !srv.exit(t, time.Second) {
			t.Fatalf("server exited with %v, want SIGKILL at %s:\n%s", srv.err, point, srv.logs)
		}
		takeovers += strings.Count(srv.logs.String(), "took over abandoned attempt")
	}
	answered := 0
	for _, in := range intents {
		if in.final != nil {
			answered++
		}
	}

	fast.expired()
	rec := reconcile(t, db, sim.url, fast)
	if rec.unknown != 0 {
		t.Errorf("reconcile left %d unknown, want 0: the provider is healthy", rec.unknown)
	}
	b := checkBooks(t, db, ledger)
	srv := startServe(t, db, sim.url, fast, nil)
	kinds := checkAnswers(t, c, srv.url, m, intents, b)
	after := checkBooks(t, db, ledger)
	t.Logf("%s: %d SIGKILLs; %d requests for %d intents; %d answered finally before a kill (each replayed byte for byte after); %d claims taken over by a retry",
		point, kills, requests, len(intents), answered, takeovers)
	t.Logf("%s: %v; %v", point, rec, readOutbox(t, db))
	t.Logf("%s: after reconcile: %v; retries: %v; at the end: %v", point, b, kinds, after)
}

// crashRound pays with crashWorkers clients against srv, whose crash point
// is armed, until it dies. It returns how many requests it sent. A request
// may get no answer (the kill), a final one (kept, and checked against any
// earlier one), or a retryable one; anything else fails the test.
func crashRound(t *testing.T, srv *child, c *http.Client, m merchant, next func() *intent) int {
	var (
		sent atomic.Int64
		wg   sync.WaitGroup
	)
	for range crashWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent.Add(1) <= maxRoundRequests {
				select {
				case <-srv.done:
					return
				default:
				}
				in := next() // this worker's alone until the round ends
				in.sent = time.Now()
				r, err := pay(c, srv.url, m, in)
				switch {
				case err != nil: // the kill: no answer, and no server to ask again
					select {
					case <-srv.done:
					case <-time.After(5 * time.Second):
						t.Errorf("key %s: %v, but the server is still running", in.key, err)
					}
					return
				case r.final():
					in.settle(t, r)
				case !r.retryable():
					t.Errorf("key %s: answer = %v, want 201, 402, or 409/503 with Retry-After", in.key, r)
				}
			}
		}()
	}
	wg.Wait()
	return int(min(sent.Load(), maxRoundRequests))
}

// 30 clients each pay a run of intents, retrying each with its key until a
// final answer, while the server is SIGKILLed at random moments and
// restarted on the same address. Then reconcile; the books must agree and
// every intent's final answer must be what a retry gets now.
func TestRandomKillsUnderLoad(t *testing.T) {
	const clients = 30
	dir := t.TempDir()
	sim, ledger := startSim(t, dir, 20*time.Millisecond)
	db := filepath.Join(dir, "oncepay.db")
	m := createAPIKey(t, db)
	// Reconcile runs too, so it races the clients' own retries for the
	// claims each kill abandons.
	serve := func(extra ...string) *child {
		return startServe(t, db, sim.url, fast, nil, append([]string{"--reconcile-schedule", "@every 1s"}, extra...)...)
	}
	srv := serve()
	base := srv.url // every restart listens here again
	c := newClient()

	var (
		mu      sync.Mutex
		intents []*intent
		tries   retries
		wg      sync.WaitGroup
	)
	// stop ends the clients after their current intent; a test that fails
	// early ends its context, which ends them at once.
	stop := make(chan struct{})
	ctx := t.Context()
	deadline := time.Now().Add(time.Duration(randomKills)*time.Second + time.Minute)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				in := newIntent(fmt.Sprintf("client%d-intent%d", i, n), 100+rand.IntN(10000), "tok_visa")
				r := payUntilFinal(ctx, t, c, func() string { return base }, m, in, deadline)
				mu.Lock()
				intents = append(intents, in)
				tries.add(r)
				mu.Unlock()
			}
		}()
	}
	t.Cleanup(wg.Wait)
	takeovers, settled := 0, 0
	count := func(srv *child) {
		takeovers += strings.Count(srv.logs.String(), "took over abandoned attempt")
		settled += strings.Count(srv.logs.String(), "reconcile: settled")
	}
	for range randomKills {
		time.Sleep(time.Duration(100+rand.IntN(700)) * time.Millisecond)
		srv.kill(t)
		count(srv)
		srv = serve("--addr", strings.TrimPrefix(base, "http://"))
	}
	time.Sleep(time.Second) // load on the last server too
	close(stop)
	wg.Wait()
	srv.kill(t)
	count(srv)

	fast.expired()
	rec := reconcile(t, db, sim.url, fast)
	b := checkBooks(t, db, ledger)
	srv = serve()
	kinds := checkAnswers(t, c, srv.url, m, intents, b)
	t.Logf("%d SIGKILLs under load; %d intents by %d clients; retries: %+v; %d claims taken over by a retry, %d settled by the server's reconcile",
		randomKills, len(intents), clients, tries, takeovers, settled)
	t.Logf("%v; %v; retries after: %v", rec, b, kinds)
}

// retries counts the answers that sent a client back with the same key.
type retries struct{ NoAnswer, InProgress, Unavailable int }

func (r *retries) add(o retries) {
	r.NoAnswer += o.NoAnswer
	r.InProgress += o.InProgress
	r.Unavailable += o.Unavailable
}

// payUntilFinal pays in, retrying with its key, as docs/client.md tells a client
// to: on no answer, 409 in progress and 503; until a final answer, the
// deadline, or the end of ctx. Each try goes to the server base returns.
// It runs on a client's goroutine, so it reports with Errorf.
func payUntilFinal(ctx context.Context, t *testing.T, c *http.Client, base func() string, m merchant, in *intent, deadline time.Time) retries {
	var n retries
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return n
		}
		r, err := pay(c, base(), m, in)
		switch {
		case err != nil:
			n.NoAnswer++
		case r.final():
			in.settle(t, r)
			return n
		case r.retryable() && r.status == http.StatusConflict:
			n.InProgress++
		case r.retryable():
			n.Unavailable++
		default:
			t.Errorf("key %s: answer = %v, want 201, 402, or 409/503 with Retry-After", in.key, r)
			return n
		}
		// Shorter than Retry-After, so a short test sees many retries.
		time.Sleep(time.Duration(20+rand.IntN(30)) * time.Millisecond)
	}
	t.Errorf("key %s: no final answer by the deadline", in.key)
	return n
}
