package crashtest

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// How a lossy endpoint treats one delivery.
const (
	dropBefore = "dropped before the work" // connection reset, nothing done
	dropAfter  = "dropped after the work"  // the event kept, the connection closed with no answer
	answer500  = "answered 500"            // nothing done
	hung       = "hung past the timeout"   // the event kept late, after the sender gave up
	answered   = "answered 204"            // the event kept (or found kept: a duplicate)
	unverified = "refused: did not verify" // never, from oncepay
)

// lossyEndpoint is a merchant's endpoint on a bad day, on a real socket:
// it drops 30% of the deliveries it gets (half reset before it did
// anything, half closed with no answer after it kept the event), answers
// 500 to 20%, hangs past the deliverer's timeout on 10% (keeping the event
// late, once the sender has given up), and answers 204 to the rest. Every
// delivery is verified with the Standard Webhooks reference library,
// timestamp and all, before anything else. Its work is to keep each event
// once by webhook-id: a copy of an event it already kept is a duplicate,
// discarded (and, answered 204, done).
type lossyEndpoint struct {
	url    string
	secret atomic.Value
	// minGap is the least time between two copies of an event, when the
	// first failed: the deliverer's shortest wait, less its jitter.
	minGap time.Duration

	mu         sync.Mutex
	kept       map[string][]byte      // the receiver's books: each event once, by webhook-id
	copies     map[string][]time.Time // when each copy of an event arrived
	inFlight   map[string]int
	outcomes   map[string]int // deliveries by how they were treated
	duplicates int            // copies of an event already kept, discarded
	bad        []string       // what breaks the deliverer's promises
}

func newLossyEndpoint(t *testing.T, minGap time.Duration) *lossyEndpoint {
	t.Helper()
	e := &lossyEndpoint{minGap: minGap, kept: map[string][]byte{}, copies: map[string][]time.Time{},
		inFlight: map[string]int{}, outcomes: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(e.serve), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	e.url = "http://" + ln.Addr().String() + "/oncepay"
	return e
}

func (e *lossyEndpoint) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	arrived := time.Now()
	id := r.Header.Get("webhook-id")
	wh, werr := standardwebhooks.NewWebhook(e.secret.Load().(string))
	if err != nil || werr != nil || wh.Verify(body, r.Header) != nil {
		e.count(unverified)
		e.fail("a delivery of %q did not verify", id)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	e.mu.Lock()
	if e.inFlight[id] > 0 {
		e.bad = append(e.bad, fmt.Sprintf("%s: a copy arrived while another was in flight (two deliverers at once)", id))
	}
	if prev := e.copies[id]; len(prev) > 0 {
		// Every copy but an answered one ends in a failure, after which
		// the next waits its backoff: none comes sooner.
		if gap := arrived.Sub(prev[len(prev)-1]); gap < e.minGap {
			e.bad = append(e.bad, fmt.Sprintf("%s: a copy %s after the one before, want at least %s (a try not fenced out?)", id, gap.Round(time.Millisecond), e.minGap))
		}
	}
	e.copies[id] = append(e.copies[id], arrived)
	e.inFlight[id]++
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.inFlight[id]--
		e.mu.Unlock()
	}()

	switch roll := rand.Float64(); {
	case roll < 0.15:
		e.count(dropBefore)
		drop(w, true)
	case roll < 0.30:
		e.keep(id, body)
		e.count(dropAfter)
		drop(w, false)
	case roll < 0.50:
		e.count(answer500)
		http.Error(w, "try again", http.StatusInternalServerError)
	case roll < 0.60:
		e.count(hung)
		select {
		case <-r.Context().Done(): // the deliverer gave up and closed the connection
		case <-time.After(time.Minute):
		}
		e.keep(id, body)
	default:
		e.keep(id, body)
		e.count(answered)
		w.WriteHeader(http.StatusNoContent)
	}
}

// drop closes the connection with no answer: reset (RST), or closed.
func drop(w http.ResponseWriter, reset bool) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err) // HTTP/1.1 on a plain socket: always a Hijacker
	}
	if tcp, ok := conn.(*net.TCPConn); ok && reset {
		tcp.SetLinger(0)
	}
	conn.Close()
}

// keep is the receiver's work: the event once by webhook-id; a copy is a
// duplicate, and must be the same bytes.
func (e *lossyEndpoint) keep(id string, body []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	prev, ok := e.kept[id]
	switch {
	case !ok:
		e.kept[id] = body
	case !bytes.Equal(prev, body):
		e.bad = append(e.bad, fmt.Sprintf("%s: a copy with another body:\n%s\n%s", id, prev, body))
	default:
		e.duplicates++
	}
}

func (e *lossyEndpoint) count(outcome string) {
	e.mu.Lock()
	e.outcomes[outcome]++
	e.mu.Unlock()
}

func (e *lossyEndpoint) fail(format string, args ...any) {
	e.mu.Lock()
	e.bad = append(e.bad, fmt.Sprintf(format, args...))
	e.mu.Unlock()
}

// deliverTotals adds up what deliverer runs said they did.
type deliverTotals struct{ runs, delivered, retried, gaveUp, skipped int }

var deliverLine = regexp.MustCompile(`(\d+) due, (\d+) delivered, (\d+) to try again, (\d+) failed for good, (\d+) skipped`)

func (d *deliverTotals) add(out string) bool {
	m := deliverLine.FindStringSubmatch(out)
	if m == nil {
		return false
	}
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	d.runs++
	d.delivered += n(2)
	d.retried += n(3)
	d.gaveUp += n(4)
	d.skipped += n(5)
	return true
}

// The test: a receiver that drops 30% of deliveries, answers 500
// to 20% and hangs past the timeout on 10%, while payments, refunds and
// reconciles run, with two deliverers racing (serve's, and "oncepay
// deliver" run again and again beside it): every event is delivered, and
// the receiver, deduping by webhook-id and verifying each delivery with the
// reference library, keeps each exactly once; no event is missing for any
// state change in the books, and none is in the books without its change.
// No two copies of an event are in flight at once, and none comes before
// the wait after a failed one (the lease and the fence).
func TestLossyReceiver(t *testing.T) {
	const (
		timeout = 300 * time.Millisecond
		backoff = 400 * time.Millisecond
		tries   = 40 // 0.6^40: no event runs out of tries
	)
	workers, perWorker := 6, 20
	if testing.Short() {
		perWorker = 6
	}
	dir := t.TempDir()
	simProc, ledger := startSim(t, dir, 0)
	db := filepath.Join(dir, "oncepay.db")
	m := createAPIKey(t, db)
	hook := newLossyEndpoint(t, backoff*9/10)
	hook.secret.Store(lastLine(runCLI(t, "endpoint", "add", "--merchant", m.scope, "--url", hook.url, "--allow-insecure-endpoints", "--db", db)))

	deliverFlags := []string{"--allow-insecure-endpoints", "--delivery-timeout", timeout.String(),
		"--delivery-backoff", strings.TrimSuffix(strings.Repeat(backoff.String()+",", tries), ",")}
	// serve's deliverer works through each batch two at a time, so it
	// often comes to a delivery the other has tried since it read it:
	// the claim's fence must turn it away.
	srv := startServe(t, db, simProc.url, fast, []string{"ONCEPAY_ADMIN_TOKEN=" + adminToken},
		append([]string{"--deliver-schedule", "@every 1s", "--reconcile-schedule", "@every 1s", "--delivery-parallel", "2"}, deliverFlags...)...)
	// A fifth of the provider's answers lost (after charging, or before):
	// payments and refunds whose outcome is unknown, some retried by
	// their client, some left to reconcile.
	setSimFaults(t, simProc.url, `{"latency":"0s","fail_before_charge":0.05,"fail_after_charge":0.15,"fail_lookup":0,"no_dedupe":false}`)

	// The second deliverer: oncepay deliver, again and again, racing serve's.
	var (
		stop    = make(chan struct{})
		loop    sync.WaitGroup
		cliRuns deliverTotals
	)
	loop.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			cmd := exec.Command(oncepay, append([]string{"deliver", "--db", db}, deliverFlags...)...)
			cmd.Env = cleanEnv()
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil || !cliRuns.add(string(out)) {
				t.Errorf("oncepay deliver: %v: %s\n%s", err, out, stderr.String())
				return
			}
		}
	})

	// The clients: payments (a fifth declined), refunds of a third of the
	// ones charged; an answer lost is retried with its key half the time,
	// and left to reconcile the other half.
	c := newClient()
	var abandoned, refunds atomic.Int32
	var clients sync.WaitGroup
	for w := range workers {
		clients.Go(func() {
			for i := range perWorker {
				source := "tok_visa"
				if rand.IntN(5) == 0 {
					source = "tok_chargeDeclined"
				}
				in := newIntent(fmt.Sprintf("lossy-%d-%d", w, i), 1000+i, source)
				if !sendOrAbandon(t, c, srv.url, m, in, &abandoned) || in.final.status != http.StatusCreated || rand.IntN(3) != 0 {
					continue
				}
				refunds.Add(1)
				sendOrAbandon(t, c, srv.url, m, &intent{key: in.key + "-refund", path: "/v1/payments/" + in.final.field("id") + "/refunds",
					body: fmt.Sprintf(`{"amount":%d}`, 300+i)}, &abandoned)
			}
		})
	}
	clients.Wait()

	// Reconcile settles what the clients left; then the deliverers empty
	// the backlog.
	deadline := time.Now().Add(2 * time.Minute)
	for inProgress(t, db) > 0 || pendingDeliveries(t, db) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes: %d attempts in progress, %d deliveries pending", inProgress(t, db), pendingDeliveries(t, db))
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(stop)
	loop.Wait()

	// The books: every change has its one event (checkOutbox), the ledger
	// agrees with the attempts, and GET /v1/events lists every event.
	checkBooks(t, db, ledger)
	out := readOutbox(t, db)
	listed := listAllEvents(t, c, srv.url, m)
	if len(listed) != out.count {
		t.Errorf("GET /v1/events listed %d events, the books hold %d", len(listed), out.count)
	}

	hook.mu.Lock()
	defer hook.mu.Unlock()
	for _, bad := range hook.bad {
		t.Error(bad)
	}
	for id, body := range listed {
		got, ok := hook.kept[id]
		switch {
		case !ok:
			t.Errorf("event %s never reached the receiver", id)
		case !jsonEqual(got, body):
			t.Errorf("event %s: the receiver kept %s, GET /v1/events lists %s", id, got, body)
		}
	}
	for id := range hook.kept {
		if _, ok := listed[id]; !ok {
			t.Errorf("the receiver kept %s, which GET /v1/events does not list", id)
		}
	}
	states := deliveryStates(t, db)
	if states["delivered"] != out.count || len(states) != 1 {
		t.Errorf("deliveries by state = %v, want all %d delivered", states, out.count)
	}

	metrics := deliveryMetrics(t, c, srv.url)
	var copies int
	for _, cs := range hook.copies {
		copies += len(cs)
	}
	objects := map[string]int{}
	for id, status := range out.status {
		objects[strings.SplitN(id, "_", 2)[0]+" "+status]++
	}
	t.Logf("books: %d events of %v; %d payments, %d refunds asked for, %d lost answers left to reconcile", out.count, objects,
		workers*perWorker, refunds.Load(), abandoned.Load())
	t.Logf("receiver: %d deliveries: %v; kept %d events once each, discarded %d duplicates", copies, hook.outcomes, len(hook.kept), hook.duplicates)
	t.Logf("serve's deliverer: %v; oncepay deliver: %d runs, %d delivered, %d to try again, %d failed for good, %d skipped (the other had it)",
		metrics, cliRuns.runs, cliRuns.delivered, cliRuns.retried, cliRuns.gaveUp, cliRuns.skipped)
	if hook.duplicates == 0 || hook.outcomes[dropBefore] == 0 || hook.outcomes[hung] == 0 || hook.outcomes[answer500] == 0 {
		t.Errorf("the receiver was not lossy enough to prove anything: %v, %d duplicates", hook.outcomes, hook.duplicates)
	}
	if abandoned.Load() == 0 || cliRuns.delivered == 0 || metrics["delivered"] == 0 {
		t.Errorf("nothing left to reconcile (%d), or one deliverer did nothing (oncepay deliver %d, serve %v)", abandoned.Load(), cliRuns.delivered, metrics)
	}
}

// sendOrAbandon sends in until a final answer, retrying with its key as a
// client would; but when an answer is lost (503, outcome unknown) it gives
// up half the time, leaving the attempt in progress for reconcile. It
// reports whether in got a final answer. A refund refused for exceeding
// what is left is final too.
func sendOrAbandon(t *testing.T, c *http.Client, base string, m merchant, in *intent, abandoned *atomic.Int32) bool {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(30 * time.Millisecond) {
		r, err := pay(c, base, m, in)
		switch {
		case err != nil:
			t.Errorf("key %s: %v", in.key, err)
			return false
		case r.final():
			in.settle(t, r)
			return true
		case r.status == http.StatusServiceUnavailable && r.field("type") == "/problems/payment-outcome-unknown" && rand.IntN(2) == 0:
			abandoned.Add(1)
			return false
		case r.retryable():
		default:
			t.Errorf("key %s: answer = %v, want 201, 402, or 409/503 with Retry-After", in.key, r)
			return false
		}
	}
	t.Errorf("key %s: no final answer in 30s", in.key)
	return false
}

// inProgress counts the attempts db holds in progress.
func inProgress(t *testing.T, db string) int {
	t.Helper()
	return countRows(t, db, `SELECT count(*) FROM payment_attempts WHERE status = 'in_progress'`)
}

// deliveryStates counts db's deliveries by state.
func deliveryStates(t *testing.T, db string) map[string]int {
	t.Helper()
	d := openReadOnly(t, db)
	defer d.Close()
	states := map[string]int{}
	query(t, d, `SELECT state, count(*) FROM deliveries GROUP BY state`, func(rows *sql.Rows) error {
		var state string
		var n int
		err := rows.Scan(&state, &n)
		states[state] = n
		return err
	})
	return states
}

// listAllEvents walks GET /v1/events as m, oldest page last, and returns
// each event's JSON by id.
func listAllEvents(t *testing.T, c *http.Client, base string, m merchant) map[string]json.RawMessage {
	t.Helper()
	events := map[string]json.RawMessage{}
	after := ""
	for {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/events?limit=100&starting_after="+after, nil)
		req.Header.Set("Authorization", "Bearer "+m.secret)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Data    []json.RawMessage `json:"data"`
			HasMore bool              `json:"has_more"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/events = %d, %v", resp.StatusCode, err)
		}
		for _, e := range page.Data {
			var head struct{ ID string }
			json.Unmarshal(e, &head)
			events[head.ID] = e
			after = head.ID
		}
		if !page.HasMore {
			return events
		}
	}
}

// jsonEqual reports whether a and b are the same JSON, whitespace aside.
func jsonEqual(a, b []byte) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

// deliveryMetrics reads oncepay_deliveries_total by outcome from serve's
// metrics.
func deliveryMetrics(t *testing.T, c *http.Client, base string) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, outcome := range []string{"delivered", "retried", "failed", "skipped"} {
		n := scrape(c, base, `oncepay_deliveries_total{outcome="`+outcome+`"}`)
		if n < 0 {
			t.Fatalf("GET /metrics has no oncepay_deliveries_total{outcome=%q}", outcome)
		}
		got[outcome] = int(n)
	}
	return got
}
