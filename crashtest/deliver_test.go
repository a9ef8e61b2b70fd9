package crashtest

import (
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// merchantEndpoint is a merchant's endpoint on loopback: it verifies every
// delivery with the Standard Webhooks reference library and keeps what it
// got, by webhook-id.
type merchantEndpoint struct {
	*httptest.Server
	secret atomic.Value
	mu     sync.Mutex
	copies map[string]int
	bodies map[string]string
	bad    atomic.Int32 // deliveries that did not verify, or changed body
}

func newMerchantEndpoint(t *testing.T) *merchantEndpoint {
	e := &merchantEndpoint{copies: map[string]int{}, bodies: map[string]string{}}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		wh, err := standardwebhooks.NewWebhook(e.secret.Load().(string))
		if err != nil || wh.Verify(b, r.Header) != nil {
			e.bad.Add(1)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		id := r.Header.Get("webhook-id")
		e.mu.Lock()
		defer e.mu.Unlock()
		if prev, ok := e.bodies[id]; ok && prev != string(b) {
			e.bad.Add(1)
		}
		e.copies[id]++
		e.bodies[id] = string(b)
	}))
	t.Cleanup(e.Close)
	return e
}

// lastLine is the last line of a command's output: where a secret is.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// pendingDeliveries counts the deliveries db still owes.
func pendingDeliveries(t *testing.T, db string) int {
	t.Helper()
	return countRows(t, db, `SELECT count(*) FROM deliveries WHERE state = 'pending'`)
}

// SIGKILL at each crash point of a delivery, again and again, restarting
// after each kill: once claimed, before it is sent (the next try waits for
// the lease); once sent, before how it ended is stored (it is sent again).
// Every event reaches the merchant's endpoint, verified, at least once, and
// every copy of one has its one webhook-id and its one body.
func TestDeliveryCrashPoints(t *testing.T) {
	for _, point := range []string{"after-delivery-claim", "after-delivery-send"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			sim, _ := startSim(t, dir, 0)
			db := filepath.Join(dir, "oncepay.db")
			m := createAPIKey(t, db)
			hook := newMerchantEndpoint(t)
			hook.secret.Store(lastLine(runCLI(t, "endpoint", "add", "--merchant", m.scope, "--url", hook.URL, "--allow-insecure-endpoints", "--db", db)))
			// A try that times out on a loaded machine is tried again within
			// seconds, not after the default schedule's minute.
			deliver := []string{"--allow-insecure-endpoints", "--deliver-schedule", "@every 1s", "--delivery-timeout", "300ms", "--delivery-backoff", "1s"}

			srv := startServe(t, db, sim.url, fast, nil, "--deliver-schedule", "off")
			c := newClient()
			const payments = 12
			for i := range payments {
				if r := mustPay(t, c, srv.url, m, newIntent(fmt.Sprintf("%s-%d", point, i), 100+i, "tok_visa")); r.status != http.StatusCreated {
					t.Fatalf("payment %d = %v, want 201", i, r)
				}
			}
			srv.kill(t)
			kills, rounds := 0, 40
			if testing.Short() {
				rounds = 10
			}
			for round := 0; round < rounds && pendingDeliveries(t, db) > 0; round++ {
				srv = startServe(t, db, sim.url, fast, crashEnv(point, 0.5), deliver...)
				if died(srv, func() bool { return pendingDeliveries(t, db) == 0 }) {
					if !srv.exit(t, time.Second) {
						t.Fatalf("server exited with %v, want SIGKILL at %s:\n%s", srv.err, point, srv.logs)
					}
					kills++
					continue
				}
				srv.kill(t)
			}
			srv = startServe(t, db, sim.url, fast, nil, deliver...)
			for deadline := time.Now().Add(time.Minute); pendingDeliveries(t, db) > 0; time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d deliveries still pending after a minute", pendingDeliveries(t, db))
				}
			}

			events := map[string]bool{}
			d := openReadOnly(t, db)
			query(t, d, `SELECT id FROM events`, func(rows *sql.Rows) error {
				var id string
				err := rows.Scan(&id)
				events[id] = true
				return err
			})
			d.Close()
			hook.mu.Lock()
			defer hook.mu.Unlock()
			again := 0
			for id := range events {
				if hook.copies[id] == 0 {
					t.Errorf("event %s never reached the endpoint", id)
				}
				again += hook.copies[id] - 1
			}
			for id := range hook.copies {
				if !events[id] {
					t.Errorf("the endpoint got %s, which is no event", id)
				}
			}
			if n := hook.bad.Load(); n != 0 {
				t.Errorf("%d deliveries did not verify or changed their body", n)
			}
			if len(events) != payments || kills < 3 {
				t.Errorf("%d events, %d kills; want %d events and at least 3 kills at %s", len(events), kills, payments, point)
			}
			if point == "after-delivery-send" && again == 0 {
				t.Errorf("no event was delivered twice: no kill came between a send and its end")
			}
			t.Logf("%s: %d kills; %d events delivered, %d copies sent again after a kill (same id, same body)", point, kills, len(events), again)
			if strings.Contains(srv.logs.String(), `"level":"ERROR"`) {
				t.Errorf("the last server logged an error:\n%s", srv.logs)
			}
		})
	}
}
