package crashtest

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/pgstore"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// intent is one payment a client means to make once, under one key, and
// the first final answer it got.
type intent struct {
	key   string
	path  string // where it is posted: /v1/payments, or a payment's refunds
	body  string
	final *reply
	sent  time.Time // when it was last sent
}

func newIntent(key string, amount int, source string) *intent {
	return &intent{key: key, path: "/v1/payments", body: fmt.Sprintf(`{"amount":%d,"currency":"EUR","source":%q}`, amount, source)}
}

// settle keeps r as in's final answer, or checks it against the one kept:
// once given, a final answer is the answer forever, across crashes too.
func (in *intent) settle(t *testing.T, r reply) {
	if in.final == nil {
		in.final = &r
		return
	}
	if !r.same(*in.final) {
		t.Errorf("key %s: answer = %v, want the earlier final answer %v", in.key, r, *in.final)
	}
}

// reply is an HTTP answer as the client saw it.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, bytes.TrimSpace(r.body)) }

// final reports whether r ends the intent: charged, or definitively not.
func (r reply) final() bool {
	return r.status == http.StatusCreated || r.status == http.StatusPaymentRequired
}

// same reports whether r is byte for byte the answer o.
func (r reply) same(o reply) bool { return r.status == o.status && bytes.Equal(r.body, o.body) }

// field is a string field of r's JSON body: a problem's "type", a payment's
// "charge_id".
func (r reply) field(name string) string {
	var m map[string]any
	json.Unmarshal(r.body, &m) // a body that is not JSON has no fields
	s, _ := m[name].(string)
	return s
}

// retryable reports whether r tells the client to come back with the same
// key: 409 in progress or 503, each with Retry-After.
func (r reply) retryable() bool {
	if r.header.Get("Retry-After") == "" {
		return false
	}
	switch r.field("type") {
	case "/problems/request-in-progress":
		return r.status == http.StatusConflict
	case "/problems/payment-outcome-unknown", "/problems/service-unavailable":
		return r.status == http.StatusServiceUnavailable
	}
	return false
}

func newClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64 // up to 50 clients share one server
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

// pay sends in (a payment or a refund) once as m. An error means no answer
// came: the server is down or died mid-request.
func pay(c *http.Client, base string, m merchant, in *intent) (reply, error) {
	req, err := http.NewRequest(http.MethodPost, base+in.path, strings.NewReader(in.body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Authorization", "Bearer "+m.secret)
	req.Header.Set("Idempotency-Key", in.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

func mustPay(t *testing.T, c *http.Client, base string, m merchant, in *intent) reply {
	t.Helper()
	r, err := pay(c, base, m, in)
	if err != nil {
		t.Fatalf("key %s: %v", in.key, err)
	}
	return r
}

// wantProblem checks that r is the problem typ with status and, if retry,
// a Retry-After header.
func wantProblem(t *testing.T, r reply, status int, typ string, retry bool) {
	t.Helper()
	if r.status != status || r.field("type") != typ {
		t.Errorf("answer = %v, want %d %s", r, status, typ)
	}
	if got := r.header.Get("Retry-After") != ""; got != retry {
		t.Errorf("Retry-After present = %v, want %v", got, retry)
	}
}

// books are the two sides that must agree: what the provider charged, and
// what oncepay recorded, both keyed by the downstream idempotency key.
type books struct {
	charges  map[string]charge
	attempts map[string]attempt
}

type charge struct {
	id     string
	amount int64
}

type attempt struct {
	scope, key, status, chargeID string
	amount                       int64
}

func (b books) count(status string) int {
	n := 0
	for _, a := range b.attempts {
		if a.status == status {
			n++
		}
	}
	return n
}

func (b books) String() string {
	return fmt.Sprintf("%d ledger charges; %d attempts: %d succeeded, %d failed, %d in progress",
		len(b.charges), len(b.attempts), b.count("succeeded"), b.count("failed"), b.count("in_progress"))
}

// openReadOnly opens a SQLite file the way a test may: it never writes.
func openReadOnly(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// readBooks reads the provider's ledger of charges and oncepay's payment
// attempts (refunds have books of their own: refundBooks).
func readBooks(t *testing.T, dbPath, ledgerPath string) books {
	t.Helper()
	b := books{charges: map[string]charge{}, attempts: map[string]attempt{}}
	ledger := openReadOnly(t, ledgerPath)
	defer ledger.Close()
	query(t, ledger, `SELECT idempotency_key, id, amount FROM sim_charges`, func(rows *sql.Rows) error {
		var dk string
		var c charge
		err := rows.Scan(&dk, &c.id, &c.amount)
		b.charges[dk] = c
		return err
	})
	const attempts = `SELECT scope, idempotency_key, status, coalesce(charge_id, ''), amount FROM payment_attempts WHERE kind = 'payment'`
	add := func(a attempt) { b.attempts[payment.DownstreamKey(a.scope, a.key)] = a }
	if pgstore.IsURL(dbPath) {
		readPostgres(t, dbPath, attempts, func(rows pgx.Rows) error {
			var a attempt
			err := rows.Scan(&a.scope, &a.key, &a.status, &a.chargeID, &a.amount)
			add(a)
			return err
		})
		return b
	}
	db := openReadOnly(t, dbPath)
	defer db.Close()
	query(t, db, attempts, func(rows *sql.Rows) error {
		var a attempt
		err := rows.Scan(&a.scope, &a.key, &a.status, &a.chargeID, &a.amount)
		add(a)
		return err
	})
	return b
}

// readPostgres runs q on the PostgreSQL database at url and calls scan for
// every row.
func readPostgres(t *testing.T, url, q string, scan func(pgx.Rows) error) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// checkBooks reads the books after every crash has been recovered from and
// fails the test unless they agree: nothing in progress; every ledger charge
// has exactly one succeeded attempt with its charge id and amount; no
// attempt claims a charge the ledger lacks or marks a charged payment failed;
// no key charged twice; every change of a payment or refund has its one
// event (checkOutbox); both files pass PRAGMA integrity_check (the ledger
// alone when oncepay's database is PostgreSQL).
func checkBooks(t *testing.T, dbPath, ledgerPath string) books {
	t.Helper()
	if pgstore.IsURL(dbPath) {
		checkIntegrity(t, ledgerPath)
	} else {
		checkIntegrity(t, dbPath, ledgerPath)
	}
	ledger := openReadOnly(t, ledgerPath)
	query(t, ledger, `SELECT idempotency_key, count(*) FROM sim_charges GROUP BY idempotency_key HAVING count(*) > 1`, func(rows *sql.Rows) error {
		var dk string
		var n int
		err := rows.Scan(&dk, &n)
		t.Errorf("downstream key %s: %d charges, want at most 1", dk, n)
		return err
	})
	ledger.Close()

	checkOutbox(t, dbPath)
	b := readBooks(t, dbPath, ledgerPath)
	byCharge := map[string]int{}
	for dk, a := range b.attempts {
		c, charged := b.charges[dk]
		switch {
		case a.status == "in_progress":
			t.Errorf("key %s: still in progress after recovery", a.key)
		case a.status == "succeeded" && !charged:
			t.Errorf("key %s: succeeded with charge %s, but the ledger has no charge under its key", a.key, a.chargeID)
		case a.status == "succeeded" && (a.chargeID != c.id || a.amount != c.amount):
			t.Errorf("key %s: succeeded with charge %s of %d, want the ledger's %s of %d", a.key, a.chargeID, a.amount, c.id, c.amount)
		case a.status == "failed" && charged:
			t.Errorf("key %s: failed, but the ledger charged it (%s)", a.key, c.id)
		}
		if a.chargeID != "" {
			byCharge[a.chargeID]++
		}
	}
	for dk, c := range b.charges {
		if _, ok := b.attempts[dk]; !ok {
			t.Errorf("ledger charge %s has no attempt", c.id)
		}
		if n := byCharge[c.id]; n != 1 {
			t.Errorf("ledger charge %s: %d attempts name it, want 1", c.id, n)
		}
	}
	return b
}

// checkIntegrity fails the test unless every file passes PRAGMA
// integrity_check.
func checkIntegrity(t *testing.T, paths ...string) {
	t.Helper()
	for _, path := range paths {
		db := openReadOnly(t, path)
		var got string
		err := db.QueryRow(`PRAGMA integrity_check`).Scan(&got)
		db.Close()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if got != "ok" {
			t.Errorf("%s: integrity_check = %q, want ok", path, got)
		}
	}
}

// query runs q on db and calls scan for every row.
func query(t *testing.T, db *sql.DB, q string, scan func(*sql.Rows) error) {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// checkAnswers retries every intent twice with its key against a server
// with no crash point armed. The answer must be what the books say (the
// ledger's charge if it has one under the key, else the stored
// not-completed 402; a key never claimed is a new payment), the same bytes
// as any final answer the client got before a crash, and the same bytes on
// the second retry. It returns how many answers were of each kind.
func checkAnswers(t *testing.T, c *http.Client, base string, m merchant, intents []*intent, b books) map[string]int {
	t.Helper()
	var (
		mu    sync.Mutex
		kinds = map[string]int{}
		wg    sync.WaitGroup
	)
	queue := make(chan *intent)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for in := range queue {
				kind := checkAnswer(t, c, base, m, in, b)
				mu.Lock()
				kinds[kind]++
				mu.Unlock()
			}
		}()
	}
	for _, in := range intents {
		queue <- in
	}
	close(queue)
	wg.Wait()
	return kinds
}

// checkAnswer checks one intent's retries and returns which kind of answer
// was due. It runs on its own goroutine, so it reports with Errorf only.
func checkAnswer(t *testing.T, c *http.Client, base string, m merchant, in *intent, b books) string {
	first, err := pay(c, base, m, in)
	if err != nil {
		t.Errorf("key %s: retry: %v", in.key, err)
		return "no answer"
	}
	second, err := pay(c, base, m, in)
	if err != nil {
		t.Errorf("key %s: second retry: %v", in.key, err)
	}
	if !second.same(first) || second.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("key %s: second retry = %v (replayed %q), want the first's bytes %v, replayed",
			in.key, second, second.header.Get("Idempotent-Replayed"), first)
	}
	if in.final != nil && !first.same(*in.final) {
		t.Errorf("key %s: retry = %v, want the final answer given before %v", in.key, first, *in.final)
	}
	dk := payment.DownstreamKey(m.scope, in.key)
	ch, charged := b.charges[dk]
	_, claimed := b.attempts[dk]
	switch {
	case charged:
		if first.status != http.StatusCreated || first.field("charge_id") != ch.id {
			t.Errorf("key %s: retry = %v, want 201 naming the ledger's charge %s", in.key, first, ch.id)
		}
		return "charged"
	case claimed:
		wantProblem(t, first, http.StatusPaymentRequired, "/problems/payment-not-completed", false)
		return "not completed"
	default: // the crash came before the claim committed: nothing was spent
		if first.status != http.StatusCreated {
			t.Errorf("key %s (never claimed): retry = %v, want 201", in.key, first)
		}
		return "never claimed"
	}
}
