package loadtest_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/oncepaytest"
	"github.com/oncepay/oncepay/loadtest"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/server"
	"github.com/oncepay/oncepay/sqlitestore"
)

// startServer serves a real oncepay (SQLite files, the simulated provider)
// over a loopback socket and returns its URL and its environment.
func startServer(t *testing.T, auth bool) (string, *oncepaytest.Env) {
	t.Helper()
	e := oncepaytest.Open(t, oncepaytest.Options{})
	// In serve mode the ledger needs the admin token; demo mode is open.
	cfg := server.Config{Payments: e.Service, Sim: e.Sim.Handler(), Log: e.Log,
		Admin: server.Admin{Token: adminToken, Open: !auth}}
	if auth {
		cfg.Keys = e.DB
	}
	srv := httptest.NewServer(server.New(cfg))
	t.Cleanup(srv.Close)
	return srv.URL, e
}

const adminToken = "bench-admin"

// smoke is a load short enough for go test -race: the invariants are
// asserted, never the speed.
func smoke(url string, sc loadtest.Scenario) loadtest.Config {
	return loadtest.Config{URL: url, Scenario: sc, Duration: 300 * time.Millisecond, Connections: 8, StormSize: 64, ReplayKeys: 40}
}

// Every scenario against a real server: no invariant violated, no 5xx, no
// request without an answer, and every key it sent was charged.
func TestScenariosSmoke(t *testing.T) {
	url, _ := startServer(t, false)
	for _, sc := range loadtest.Scenarios {
		t.Run(string(sc), func(t *testing.T) {
			rep, err := loadtest.Run(context.Background(), smoke(url, sc))
			if err != nil {
				t.Fatal(err)
			}
			if err := rep.Check(context.Background()); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			rep.Write(&out)
			t.Log("\n" + out.String())
			if rep.Violations() != 0 || rep.ServerErrors() != 0 || rep.Errors != 0 {
				t.Errorf("violations = %d, 5xx = %d, unanswered = %d, want 0, 0, 0", rep.Violations(), rep.ServerErrors(), rep.Errors)
			}
			if rep.Requests == 0 || rep.Charged != rep.Keys {
				t.Errorf("requests = %d, charged = %d of %d keys, want some requests and every key charged", rep.Requests, rep.Charged, rep.Keys)
			}
			if sc == loadtest.Storm && (rep.Storm == nil || rep.Storm.Rounds == 0 || rep.Requests != rep.Storm.Rounds*rep.Storm.Size) {
				t.Errorf("storm = %+v with %d requests, want full rounds", rep.Storm, rep.Requests)
			}
		})
	}
}

// With an API key, payments land in the key's scope; checked under the wrong
// scope, no 201 matches a ledger charge, which Check reports: the check is
// not vacuous.
func TestCheckFindsChargesByScope(t *testing.T) {
	url, e := startServer(t, true)
	scope, _, secret := e.Merchant(t, "bench")
	cfg := smoke(url, loadtest.Mixed)
	cfg.APIKey, cfg.Scope, cfg.AdminToken = secret, scope, adminToken
	rep, err := loadtest.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rep.Violations() != 0 || rep.Statuses[201] == 0 {
		t.Fatalf("violations = %d (%v), 201s = %d, want none and some", rep.Violations(), rep.ViolationMessages(), rep.Statuses[201])
	}

	cfg.Scope = "demo"
	wrong, err := loadtest.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := wrong.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if wrong.Violations() == 0 || wrong.Charged != 0 {
		t.Errorf("under the wrong scope: violations = %d, charged = %d, want some and 0", wrong.Violations(), wrong.Charged)
	}
}

// The SQL ceiling claims and records through the store without error.
func TestStoreCeiling(t *testing.T) {
	e := oncepaytest.Open(t, oncepaytest.Options{})
	c, err := loadtest.StoreCeiling(context.Background(), e.DB.(*sqlitestore.DB), 8, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	counts, err := e.DB.Counts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c.Payments == 0 || counts[payment.Succeeded] != c.Payments || c.Writes != 2*int64(c.Payments) {
		t.Errorf("ceiling = %+v, succeeded rows = %d, want every payment claimed and recorded", c, counts[payment.Succeeded])
	}
}

// The delivery benchmark with the real binary: every event a payment made
// reaches the receiver once, the counts add up, the ledger checks.
func TestDeliveriesSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	exe := filepath.Join(dir, "oncepay")
	build := exec.Command("go", "build", "-o", exe, "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	res, err := loadtest.Deliveries(context.Background(), loadtest.DeliveryConfig{Exe: exe, Dir: dir,
		Load: loadtest.Config{Duration: time.Second, Connections: 4}, Serve: []string{"--deliver-schedule", "@every 1s"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Events == 0 || res.Received != res.Events || res.Duplicates != 0 || res.InWindow > res.Received || res.Violations() != 0 {
		t.Errorf("events %d, received %d (%d in the window), %d duplicates, %d violations; want every event once",
			res.Events, res.Received, res.InWindow, res.Duplicates, res.Violations())
	}
	var out strings.Builder
	res.Write(&out)
	if !strings.Contains(out.String(), "delivered to one endpoint, each once") {
		t.Errorf("Write = %q", out.String())
	}
}
