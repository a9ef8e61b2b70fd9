package crashtest

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/oncepay/oncepay/internal/pgtest"
	"github.com/oncepay/oncepay/payment"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// link is a real TCP proxy between serve and the bank (the standalone
// simulated provider), which the test cuts and restores.
type link struct {
	proxy *toxiproxy.Proxy
}

func newLink(t *testing.T, upstreamURL string) *link {
	t.Helper()
	u, err := url.Parse(upstreamURL)
	if err != nil {
		t.Fatal(err)
	}
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "bank", "127.0.0.1:0", u.Host)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return &link{proxy: p}
}

func (l *link) url() string { return "http://" + l.proxy.Listen }

// down closes the listener and every connection: connection refused.
func (l *link) down() { l.proxy.Stop() }

// up listens again, on the same port.
func (l *link) up(t *testing.T) {
	t.Helper()
	if err := l.proxy.Start(); err != nil {
		t.Fatal(err)
	}
}

// toxic adds a toxic by its JSON (reset_peer, timeout, latency).
func (l *link) toxic(t *testing.T, js string) {
	t.Helper()
	if _, err := l.proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		t.Fatal(err)
	}
}

// clear removes every toxic.
func (l *link) clear(t *testing.T) { l.proxy.Toxics.ResetToxics(t.Context()) }

// offlineBank starts a bank that does not dedupe (a standalone simulated
// provider: a second call under a key is a second charge), a link to it,
// and a merchant of db that takes payments offline: at most 10.00 each,
// maxTotal minor units queued, for an hour.
func offlineBank(t *testing.T, db, maxTotal string) (simProc *child, ledger string, l *link, m merchant) {
	t.Helper()
	simProc, ledger = startSim(t, t.TempDir(), 0, "--sim-dedupe=false")
	l = newLink(t, simProc.url)
	m = createAPIKey(t, db)
	runCLI(t, "merchant", "offline", m.scope, "--max-amount", "1000", "--max-total", maxTotal, "--max-age", "1h", "--db", db)
	return simProc, ledger, l, m
}

// offlineServe runs serve against the provider through l, with a breaker
// that opens after 3 failures and probes every 200 ms, and the forwarder
// every second. A provider call may take a second: on a loaded machine a
// shorter timeout would trip the breaker while the link is up.
func offlineServe(t *testing.T, db string, l *link, env []string, extra ...string) *child {
	t.Helper()
	flags := []string{"--link-failures", "3", "--link-probe", "200ms", "--forward-schedule", "@every 1s"}
	return startServe(t, db, l.url(), slowBank, env, append(flags, extra...)...)
}

// ledgerCounts is the bank's charges per downstream key: with its dedupe
// off, a second call under a key is a second row.
func ledgerCounts(t *testing.T, ledgerPath string) map[string]int {
	t.Helper()
	ledger := openReadOnly(t, ledgerPath)
	defer ledger.Close()
	n := map[string]int{}
	query(t, ledger, `SELECT idempotency_key, count(*) FROM sim_charges GROUP BY idempotency_key`, func(rows *sql.Rows) error {
		var k string
		var c int
		err := rows.Scan(&k, &c)
		n[k] = c
		return err
	})
	return n
}

// queued is how many payments the merchant still has queued.
func queued(t *testing.T, c *http.Client, base string, m merchant) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/payments?status=queued&limit=100", nil)
	req.Header.Set("Authorization", "Bearer "+m.secret)
	resp, err := c.Do(req)
	if err != nil {
		return -1 // the server is down: not known
	}
	defer resp.Body.Close()
	var l struct {
		Data    []json.RawMessage `json:"data"`
		HasMore bool              `json:"has_more"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatal(err)
	}
	if l.HasMore {
		return len(l.Data) + 1 // at least
	}
	return len(l.Data)
}

// waitEmpty waits up to d for the merchant's queue to empty and returns how
// long it took.
func waitEmpty(t *testing.T, c *http.Client, base func() string, m merchant, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < d {
		if queued(t, c, base(), m) == 0 {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("queue not empty after %s", d)
	return 0
}

// An outage under load: the link to the bank is cut while 20 tills take
// payments (each sent by a storm of three at once, then retried), some over
// the merchant's limits. Within the limits every payment is answered 202
// queued; over them, 503 and never charged. The link comes back and the
// forwarder empties the queue: one charge per queued payment at a bank
// that does not dedupe, every replay byte-identical, every payment
// succeeded.
func TestOfflineOutage(t *testing.T) {
	tills, perTill := 20, 55
	if testing.Short() {
		tills, perTill = 5, 10
	}
	db := filepath.Join(t.TempDir(), "oncepay.db")
	_, ledger, l, m := offlineBank(t, db, fmt.Sprint(1000*tills*perTill))
	srv := offlineServe(t, db, l, nil)
	c := newClient()

	// The link works: a payment is charged as usual.
	if r := mustPay(t, c, srv.url, m, newIntent("before", 500, "tok_visa")); r.status != 201 {
		t.Fatalf("payment with the link up = %v, want 201", r)
	}
	l.down()
	var (
		mu               sync.Mutex
		within, over     []*intent
		queuedN, refused atomic.Int64
		otherAnswers     atomic.Int64
		wg               sync.WaitGroup
		outageStart      = time.Now()
	)
	for till := range tills {
		wg.Go(func() {
			for i := range perTill {
				amount, isOver := 500, i%10 == 9
				if isOver {
					amount = 1500
				}
				in := newIntent(fmt.Sprintf("till%d-%d", till, i), amount, "tok_visa")
				// A storm: three at once under one key, as a till that
				// double-fires; then retries until an answer that ends it.
				var storm sync.WaitGroup
				for range 3 {
					storm.Go(func() { pay(c, srv.url, m, in) })
				}
				storm.Wait()
				var r reply
				for try := 0; try < 20; try++ {
					var err error
					if r, err = pay(c, srv.url, m, in); err == nil && !(r.status == 409 && r.retryable()) {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				mu.Lock()
				switch {
				case !isOver && r.status == http.StatusAccepted:
					queuedN.Add(1)
					in.final = &r
					within = append(within, in)
				case isOver && r.status == http.StatusServiceUnavailable:
					refused.Add(1)
					over = append(over, in)
				default:
					otherAnswers.Add(1)
					t.Errorf("key %s (over %v) during the outage = %v, want 202 within the limits, 503 over", in.key, isOver, r)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	outage := time.Since(outageStart)
	// Replays during the outage: the stored 202, byte for byte.
	for _, in := range within[:min(len(within), 50)] {
		if r := mustPay(t, c, srv.url, m, in); !r.same(*in.final) {
			t.Errorf("key %s: replay during the outage = %v, want %v", in.key, r, *in.final)
		}
	}
	l.up(t)
	drain := waitEmpty(t, c, func() string { return srv.url }, m, 2*time.Minute)
	counts := ledgerCounts(t, ledger)
	for _, in := range within {
		if n := counts[payment.DownstreamKey(m.scope, in.key)]; n != 1 {
			t.Errorf("queued payment %s: %d charges, want 1", in.key, n)
		}
		if r := mustPay(t, c, srv.url, m, in); !r.same(*in.final) {
			t.Errorf("key %s: replay after forwarding = %v, want the 202 %v", in.key, r, *in.final)
		}
		id := in.final.field("id")
		if st := getStatus(t, c, srv.url, m, id); st != "succeeded" {
			t.Errorf("payment %s after forwarding = %s, want succeeded", id, st)
		}
	}
	for _, in := range over {
		if n := counts[payment.DownstreamKey(m.scope, in.key)]; n != 0 {
			t.Errorf("over-limit payment %s: %d charges, want 0", in.key, n)
		}
	}
	charges := 0
	for _, n := range counts {
		charges += n
	}
	t.Logf("outage: %d payments queued, %d over-limit refused (503), %d other answers, in %s; link restored, queue empty after %s; ledger %d charges for %d queued + 1 before",
		queuedN.Load(), refused.Load(), otherAnswers.Load(), outage.Round(time.Millisecond), drain.Round(time.Millisecond), charges, queuedN.Load())
	if charges != int(queuedN.Load())+1 {
		t.Errorf("ledger has %d charges, want %d", charges, queuedN.Load()+1)
	}
}

// getStatus reads a payment's status with GET /v1/payments/{id}.
func getStatus(t *testing.T, c *http.Client, base string, m merchant, id string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/payments/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+m.secret)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct{ Status string }
	json.NewDecoder(resp.Body).Decode(&v)
	return v.Status
}

// An ambiguous first call: the request reaches the bank, which charges,
// and the answer is lost as the link resets; the payment is queued, and
// forwarded as that one charge, never a second, at a bank that does not
// dedupe.
func TestOfflineAmbiguousCall(t *testing.T) {
	db := filepath.Join(t.TempDir(), "oncepay.db")
	simProc, ledger, l, m := offlineBank(t, db, "5000")
	srv := offlineServe(t, db, l, nil)
	c := newClient()
	// The request goes through; the bank's answer is lost, the connection
	// reset: what a link that dies mid-call does.
	setSimFaults(t, simProc.url, `{"latency":"0s","fail_before_charge":0,"fail_after_charge":1,"fail_lookup":0,"no_dedupe":true}`)
	in := newIntent("ambiguous", 700, "tok_visa")
	r := mustPay(t, c, srv.url, m, in)
	if r.status != http.StatusAccepted {
		t.Fatalf("payment whose answer was lost = %v, want 202 queued", r)
	}
	l.down()
	setSimFaults(t, simProc.url, `{"latency":"0s","fail_before_charge":0,"fail_after_charge":0,"fail_lookup":0,"no_dedupe":true}`)
	time.Sleep(300 * time.Millisecond)
	l.up(t)
	waitEmpty(t, c, func() string { return srv.url }, m, time.Minute)
	if n := ledgerCounts(t, ledger)[payment.DownstreamKey(m.scope, in.key)]; n != 1 {
		t.Errorf("charges = %d, want 1", n)
	}
	if st := getStatus(t, c, srv.url, m, r.field("id")); st != "succeeded" {
		t.Errorf("status = %s, want succeeded", st)
	}
}

// A link that resets connections or hangs trips the breaker like one that
// refuses them: payments are queued, answered at once, not after a
// provider timeout each.
func TestOfflineResetAndTimeout(t *testing.T) {
	for _, toxic := range []string{
		`{"name":"reset","type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`,
		`{"name":"hang","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`,
	} {
		t.Run(strings.SplitN(toxic, `"`, 5)[3], func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "oncepay.db")
			_, ledger, l, m := offlineBank(t, db, "100000")
			srv := offlineServe(t, db, l, nil)
			c := newClient()
			l.toxic(t, toxic)
			var ins []*intent
			var slowest time.Duration
			for i := range 10 {
				in := newIntent(fmt.Sprintf("k%d", i), 100, "tok_visa")
				start := time.Now()
				r := mustPay(t, c, srv.url, m, in)
				if i >= 3 { // the breaker is open by now
					slowest = max(slowest, time.Since(start))
				}
				if r.status != http.StatusAccepted {
					t.Fatalf("key %s = %v, want 202", in.key, r)
				}
				ins = append(ins, in)
			}
			if slowest >= slowBank.providerTimeout {
				t.Errorf("a payment on an open breaker took %s, want less than the provider timeout %s", slowest, slowBank.providerTimeout)
			}
			l.clear(t)
			waitEmpty(t, c, func() string { return srv.url }, m, time.Minute)
			counts := ledgerCounts(t, ledger)
			for _, in := range ins {
				if n := counts[payment.DownstreamKey(m.scope, in.key)]; n != 1 {
					t.Errorf("%s: %d charges, want 1", in.key, n)
				}
			}
		})
	}
}

// SIGKILL mid-forward, at each crash point of the forward path, again and
// again: the server is restarted after each kill and the forwarder goes on
// from what the database says. Every queued payment is charged once at a
// bank that does not dedupe.
func TestForwardCrashPoints(t *testing.T) {
	for _, point := range []string{"after-forward-claim", "after-forward-charge", "in-forwarded"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "oncepay.db")
			_, ledger, l, m := offlineBank(t, db, "100000")
			c := newClient()
			srv := offlineServe(t, db, l, nil)
			l.down()
			var ins []*intent
			for i := range 16 {
				in := newIntent(fmt.Sprintf("q%d", i), 100, "tok_visa")
				if r := mustPay(t, c, srv.url, m, in); r.status != http.StatusAccepted {
					t.Fatalf("%s = %v, want 202", in.key, r)
				}
				ins = append(ins, in)
			}
			srv.kill(t)
			l.up(t)
			kills := 0
			for round := 0; round < 60 && pendingForwards(t, db) > 0; round++ {
				srv = offlineServe(t, db, l, crashEnv(point, 0.5))
				if died(srv, func() bool { return pendingForwards(t, db) == 0 }) {
					kills++
					continue
				}
				srv.kill(t) // the queue emptied first
			}
			srv = offlineServe(t, db, l, nil) // unarmed: what is left goes through
			waitEmpty(t, c, func() string { return srv.url }, m, time.Minute)
			counts := ledgerCounts(t, ledger)
			for _, in := range ins {
				if n := counts[payment.DownstreamKey(m.scope, in.key)]; n != 1 {
					t.Errorf("%s: %d charges, want 1", in.key, n)
				}
			}
			o := checkOutbox(t, db)
			t.Logf("%s: %d kills survived, 16 payments forwarded once each; %v", point, kills, o)
			if kills < 5 {
				t.Errorf("kills = %d, want at least 5 at %s", kills, point)
			}
		})
	}
}

// died waits until c exits (a crash point fired: true) or done reports
// true (false), polling.
func died(c *child, done func() bool) bool {
	for {
		select {
		case <-c.done:
			return true
		case <-time.After(50 * time.Millisecond):
		}
		if done() {
			return false
		}
	}
}

// countRows is what query, a count, finds in db, read on a connection of
// its own.
func countRows(t *testing.T, db, query string) int {
	t.Helper()
	d := openReadOnly(t, db)
	defer d.Close()
	var n int
	if err := d.QueryRow(query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// pendingForwards counts the forward queue's rows in db.
func pendingForwards(t *testing.T, db string) int {
	t.Helper()
	return countRows(t, db, `SELECT count(*) FROM forward_queue`)
}

// "oncepay forward" is one forward pass from the command line, as a timer
// or an operator runs it with no server up: it prints what it did, and the
// queued payment is charged once.
func TestForwardCommand(t *testing.T) {
	db := filepath.Join(t.TempDir(), "oncepay.db")
	_, ledger, l, m := offlineBank(t, db, "5000")
	srv := offlineServe(t, db, l, nil, "--forward-schedule", "off")
	l.down()
	in := newIntent("by-hand", 300, "tok_visa")
	if r := mustPay(t, newClient(), srv.url, m, in); r.status != http.StatusAccepted {
		t.Fatalf("payment on a dead link = %v, want 202", r)
	}
	srv.kill(t)
	l.up(t)
	out := runCLI(t, append([]string{"forward", "--db", db, "--provider", l.url()}, slowBank.flags()...)...)
	if want := "forward: 1 due, 1 succeeded"; !strings.Contains(out, want) {
		t.Errorf("oncepay forward printed %q, want %q", out, want)
	}
	if n := ledgerCounts(t, ledger)[payment.DownstreamKey(m.scope, in.key)]; n != 1 {
		t.Errorf("charges = %d, want 1", n)
	}
	if left := pendingForwards(t, db); left != 0 {
		t.Errorf("queue = %d after forward, want 0", left)
	}
}

// Two instances on one PostgreSQL database forward one queue at once, both
// woken by the same link coming back: every payment is settled by exactly
// one of them and charged once at a bank that does not dedupe.
func TestOfflinePostgresTwoForwarders(t *testing.T) {
	const payments = 100
	db := pgtest.URL(t)
	_, ledger, l, m := offlineBank(t, db, "1000000")
	a, b := offlineServe(t, db, l, nil), offlineServe(t, db, l, nil)
	c := newClient()
	l.down()
	var ins []*intent
	for i := range payments {
		in := newIntent(fmt.Sprintf("pg-%d", i), 100+i, "tok_visa")
		srv := []*child{a, b}[i%2]
		if r := mustPay(t, c, srv.url, m, in); r.status != http.StatusAccepted {
			t.Fatalf("%s = %v, want 202", in.key, r)
		}
		ins = append(ins, in)
	}
	l.up(t)
	drain := waitEmpty(t, c, func() string { return a.url }, m, time.Minute)
	counts := ledgerCounts(t, ledger)
	for _, in := range ins {
		if n := counts[payment.DownstreamKey(m.scope, in.key)]; n != 1 {
			t.Errorf("%s: %d charges, want 1", in.key, n)
		}
	}
	settled := func(s *child) int { return strings.Count(s.logs.String(), `"msg":"forward: settled"`) }
	// The logs reach the test through pipes, behind the answers.
	for end := time.Now().Add(5 * time.Second); settled(a)+settled(b) < payments && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	if got := settled(a) + settled(b); got != payments {
		t.Errorf("settlements logged = %d (%d + %d), want %d: one per payment", got, settled(a), settled(b), payments)
	}
	t.Logf("two instances: %d and %d of %d queued payments settled, queue empty %s after the link came back", settled(a), settled(b), payments, drain.Round(time.Millisecond))
}
