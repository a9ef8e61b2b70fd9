package crashtest

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/oncepay/oncepay/loadtest"
	"github.com/oncepay/oncepay/payment"
)

// adminToken opens /metrics on the servers these tests run.
const adminToken = "crashtest-admin-token-0123456789abcdef"

// replicaLoad pays with clients at once against srv until stop is closed:
// each client makes new intents, and after each one sends an earlier one of
// its own again (a retry of a settled key). It returns the intents, in
// the order they were first sent.
type replicaLoad struct {
	mu      sync.Mutex
	intents []*intent
	created atomic.Int64 // new payments answered 201
	wg      sync.WaitGroup
	stop    chan struct{}
}

func startReplicaLoad(t *testing.T, c *http.Client, base string, m merchant, clients int, prefix string) *replicaLoad {
	l := &replicaLoad{stop: make(chan struct{})}
	for i := range clients {
		l.wg.Go(func() {
			var mine []*intent
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				in := newIntent(fmt.Sprintf("%s-client%d-%d", prefix, i, n), 100+rand.IntN(10000), "tok_visa")
				l.mu.Lock()
				l.intents = append(l.intents, in)
				l.mu.Unlock()
				mine = append(mine, in)
				r, err := pay(c, base, m, in)
				if err != nil {
					return // the server is gone
				}
				if r.status == http.StatusCreated {
					l.created.Add(1)
				}
				if r.final() {
					in.final = &r
				}
				if earlier := mine[rand.IntN(len(mine))]; earlier.final != nil {
					if r, err := pay(c, base, m, earlier); err == nil && r.final() && !r.same(*earlier.final) {
						t.Errorf("key %s: retry = %v, want the final answer %v", earlier.key, r, *earlier.final)
					}
				}
			}
		})
	}
	return l
}

// end stops the clients and waits for them.
func (l *replicaLoad) end() []*intent {
	close(l.stop)
	l.wg.Wait()
	return l.intents
}

// scrape reads one gauge or counter from srv's /metrics; -1 if it cannot.
func scrape(c *http.Client, base, name string) float64 {
	return loadtest.Scrape(c, base, adminToken, name)
}

// adminPage is srv's admin page, as its operator reads it.
func adminPage(t *testing.T, c *http.Client, base string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/admin", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// sampleLag scrapes srv's replica lag every 50 ms until stop is closed.
func sampleLag(c *http.Client, base string, stop <-chan struct{}) (samples func() []time.Duration) {
	var (
		mu  sync.Mutex
		got []time.Duration
	)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if v := scrape(c, base, "oncepay_replica_lag_seconds"); v >= 0 {
				mu.Lock()
				got = append(got, time.Duration(v*float64(time.Second)))
				mu.Unlock()
			}
		}
	}()
	return func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// medianMax is the median and the largest of d.
func medianMax(d []time.Duration) (median, largest time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}

// restoreCLI runs "oncepay restore" and returns its output and error.
func restoreCLI(args ...string) (string, error) {
	cmd := exec.Command(oncepay, append([]string{"restore"}, args...)...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// removeDB deletes a SQLite database and its -wal and -shm: the machine
// and its disk are gone.
func removeDB(t *testing.T, path string) {
	t.Helper()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
}

// The disaster: under load (new payments and retries from 16 clients),
// serve is SIGKILLed and its database deleted with its -wal and -shm; the
// database is restored from its file:// replica into a new path, serve
// starts on it, and every intent is sent again.
//
// With the bank deduping by key (the default), each intent is charged
// once, and every retry is answered with the charge that happened (its
// charge id): what the replica held in progress is settled by asking the
// bank before serve listens, and what it missed is claimed anew and
// charged under the same downstream key, which the bank dedupes. With a
// bank that does not dedupe, the intents the replica missed but the bank
// had charged are charged twice: the gap the bank's dedupe closes,
// counted.
func TestRestoreFromReplicaUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dedupe bool
	}{{"bank dedupes", true}, {"bank does not dedupe", false}} {
		t.Run(tc.name, func(t *testing.T) { restoreUnderLoad(t, tc.dedupe) })
	}
}

func restoreUnderLoad(t *testing.T, dedupe bool) {
	const clients = 16
	load := 3 * time.Second
	if testing.Short() {
		load = time.Second
	}
	dir := t.TempDir()
	sim, ledger := startSim(t, dir, 5*time.Millisecond, fmt.Sprintf("--sim-dedupe=%v", dedupe))
	db := filepath.Join(dir, "oncepay.db")
	m := createAPIKey(t, db)
	replicaURL := "file://" + filepath.Join(dir, "replica")
	c := newClient()
	replicated := []string{"--replica", replicaURL, "--admin-token", adminToken}

	// The same load without replication first, on a database of its own:
	// what replication costs the write path.
	var offRate float64
	if dedupe {
		offDir := t.TempDir()
		offSim, _ := startSim(t, offDir, 5*time.Millisecond)
		off := filepath.Join(offDir, "oncepay.db")
		offM := createAPIKey(t, off)
		srv := startServe(t, off, offSim.url, slowBank, nil)
		l := startReplicaLoad(t, c, srv.url, offM, clients, "off")
		time.Sleep(load)
		l.end()
		offRate = float64(l.created.Load()) / load.Seconds()
		srv.kill(t)
	}

	srv := startServe(t, db, sim.url, slowBank, nil, replicated...)
	stopLag := make(chan struct{})
	lags := sampleLag(c, srv.url, stopLag)
	if page := adminPage(t, c, srv.url); !strings.Contains(page, `id="replica"`) {
		t.Errorf("serve --replica: the admin page does not show the replica:\n%s", page)
	}
	l := startReplicaLoad(t, c, srv.url, m, clients, "on")
	time.Sleep(load)
	srv.kill(t) // mid-load: requests in flight die with it
	close(stopLag)
	intents := l.end()
	onRate := float64(l.created.Load()) / load.Seconds()
	removeDB(t, db)

	restored := filepath.Join(t.TempDir(), "restored.db")
	out, err := restoreCLI("--from", replicaURL, "--to", restored)
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	if !strings.Contains(out, "integrity ok") {
		t.Errorf("restore says %q, want it to say the integrity check passed", out)
	}

	// What the replica had and missed, against what the bank saw.
	before := readBooks(t, restored, ledger)
	var had, missed, missedCharged, inProgress int
	for _, in := range intents {
		dk := payment.DownstreamKey(m.scope, in.key)
		a, ok := before.attempts[dk]
		_, charged := before.charges[dk]
		switch {
		case ok:
			had++
			if a.status == "in_progress" {
				inProgress++
			}
		default:
			missed++
			if charged {
				missedCharged++
			}
		}
	}

	srv = startServe(t, restored, sim.url, slowBank, nil, replicated...)
	if !srv.logged("restored database settled") {
		t.Errorf("serve on the restored database did not settle it before listening:\n%s", srv.logs)
	}
	if strings.Index(srv.logs.String(), "restored database settled") > strings.Index(srv.logs.String(), `"msg":"listening"`) {
		t.Errorf("serve listened before it settled the restored database:\n%s", srv.logs)
	}
	if n := readBooks(t, restored, ledger).count("in_progress"); n != 0 {
		t.Errorf("serve listens with %d attempts in progress in the restored database, want 0: each settled by asking the bank first", n)
	}

	// Every intent again, until a final answer.
	var (
		wg    sync.WaitGroup
		queue = make(chan *intent)
		retry = map[string]reply{}
		mu    sync.Mutex
	)
	deadline := time.Now().Add(time.Minute)
	for range 8 {
		wg.Go(func() {
			for in := range queue {
				var r reply
				for time.Now().Before(deadline) {
					var err error
					if r, err = pay(c, srv.url, m, in); err == nil && r.final() {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				mu.Lock()
				retry[in.key] = r
				mu.Unlock()
			}
		})
	}
	for _, in := range intents {
		queue <- in
	}
	close(queue)
	wg.Wait()

	counts := ledgerCounts(t, ledger)
	after := readBooks(t, restored, ledger)
	doubles := 0
	for _, in := range intents {
		dk := payment.DownstreamKey(m.scope, in.key)
		r := retry[in.key]
		if n := counts[dk]; n > 1 {
			doubles += n - 1
		}
		ch, charged := after.charges[dk]
		switch {
		case !r.final():
			t.Errorf("key %s: no final answer after the restore: %v", in.key, r)
		case !charged:
			// Never charged: claimed in the replica and settled not
			// completed (the bank had nothing), or charged now.
			if r.status == http.StatusCreated {
				t.Errorf("key %s: 201 %s, but the bank has no charge under its key", in.key, r.field("charge_id"))
			}
		case r.status != http.StatusCreated:
			t.Errorf("key %s: retry = %v, want 201: the bank charged it (%s)", in.key, r, ch.id)
		case dedupe && r.field("charge_id") != ch.id:
			t.Errorf("key %s: retry names charge %s, want the one that happened, %s", in.key, r.field("charge_id"), ch.id)
		}
		if in.final != nil && in.final.status == http.StatusCreated && r.field("charge_id") != in.final.field("charge_id") && dedupe {
			t.Errorf("key %s: before the loss charge %s, after the restore %s", in.key, in.final.field("charge_id"), r.field("charge_id"))
		}
	}
	if dedupe {
		checkBooks(t, restored, ledger)
		if doubles != 0 {
			t.Errorf("%d second charges at a bank that dedupes, want 0", doubles)
		}
	} else if doubles != missedCharged {
		// Each charge the replica missed, sent again, is a second charge
		// at a bank that does not dedupe; nothing else is.
		t.Errorf("%d second charges, want %d: one for each charged intent the replica missed", doubles, missedCharged)
	}
	if dedupe && missed == 0 {
		t.Logf("the replica missed nothing this run: the kill came right after a sync")
	}

	median, largest := medianMax(lags())
	t.Logf("%d intents by %d clients in %s; the replica had %d records (%d of them in progress) and missed %d, %d of which the bank had charged",
		len(intents), clients, load, had, inProgress, missed, missedCharged)
	t.Logf("replica lag under load: median %s, max %s (%d samples of oncepay_replica_lag_seconds, --replica-sync-interval 1s)",
		median.Round(time.Millisecond), largest.Round(time.Millisecond), len(lags()))
	if dedupe {
		t.Logf("new payments: %.0f/s replicated, %.0f/s not (ratio %.2f); second charges: %d", onRate, offRate, onRate/offRate, doubles)
	} else {
		t.Logf("at a bank that does not dedupe, the restore cost %d second charges (the bank's dedupe is what closes the replica's gap)", doubles)
	}
}

// A restore to a point in time holds what was committed before it and
// nothing after; without --at, everything the replica has.
func TestRestoreAtTime(t *testing.T) {
	dir := t.TempDir()
	sim, _ := startSim(t, dir, 0)
	db := filepath.Join(dir, "oncepay.db")
	m := createAPIKey(t, db)
	replicaURL := "file://" + filepath.Join(dir, "replica")
	srv := startServe(t, db, sim.url, slowBank, nil, "--replica", replicaURL, "--replica-sync-interval", "100ms")
	c := newClient()
	pay := func(prefix string) {
		for i := range 5 {
			if r := mustPay(t, c, srv.url, m, newIntent(fmt.Sprintf("%s-%d", prefix, i), 500, "tok_visa")); r.status != 201 {
				t.Fatalf("pay: %v", r)
			}
		}
	}
	pay("before")
	time.Sleep(1500 * time.Millisecond) // synced, and a second apart from what follows
	at := time.Now().UTC()
	time.Sleep(1500 * time.Millisecond)
	pay("after")
	time.Sleep(500 * time.Millisecond)
	srv.kill(t)

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"at", []string{"--at", at.Format(time.RFC3339Nano)}, []string{"before"}},
		{"newest", nil, []string{"before", "after"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			to := filepath.Join(t.TempDir(), "restored.db")
			out, err := restoreCLI(append([]string{"--from", replicaURL, "--to", to}, tc.args...)...)
			if err != nil {
				t.Fatalf("restore: %v\n%s", err, out)
			}
			got := map[string]int{}
			for _, a := range readBooks(t, to, filepath.Join(dir, "ledger.db")).attempts {
				got[strings.Split(a.key, "-")[0]]++
			}
			for _, p := range []string{"before", "after"} {
				want := 0
				if slices.Contains(tc.want, p) {
					want = 5
				}
				if got[p] != want {
					t.Errorf("restored %d payments made %s %s, want %d (%s)", got[p], p, at.Format(time.RFC3339), want, strings.TrimSpace(out))
				}
			}
		})
	}
}

// restore refuses, with a clear error and nothing written, a target that
// exists, a replica that is not there, and one whose files are corrupted.
func TestRestoreRefuses(t *testing.T) {
	dir := t.TempDir()
	sim, _ := startSim(t, dir, 0)
	db := filepath.Join(dir, "oncepay.db")
	m := createAPIKey(t, db)
	replicaDir := filepath.Join(dir, "replica")
	srv := startServe(t, db, sim.url, slowBank, nil, "--replica", "file://"+replicaDir, "--replica-sync-interval", "100ms")
	c := newClient()
	for i := range 5 {
		mustPay(t, c, srv.url, m, newIntent(fmt.Sprintf("k%d", i), 500, "tok_visa"))
	}
	time.Sleep(500 * time.Millisecond)
	srv.kill(t)

	existing := filepath.Join(dir, "existing.db")
	if err := os.WriteFile(existing, []byte("an operator's file"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := restoreCLI("--from", "file://"+replicaDir, "--to", existing)
	if err == nil || !strings.Contains(out, "refuses to overwrite") {
		t.Errorf("restore over an existing file: %v, %q; want a refusal", err, out)
	}
	if b, _ := os.ReadFile(existing); string(b) != "an operator's file" {
		t.Errorf("the existing file now holds %q", b)
	}

	missing := filepath.Join(dir, "missing.db")
	out, err = restoreCLI("--from", "file://"+filepath.Join(dir, "no-replica"), "--to", missing)
	if err == nil || !strings.Contains(out, "no replica there") {
		t.Errorf("restore from a missing replica: %v, %q; want \"no replica there\"", err, out)
	}

	// Every file of a copy of the replica damaged in its middle.
	corrupt := filepath.Join(dir, "corrupt")
	if err := os.CopyFS(corrupt, os.DirFS(replicaDir)); err != nil {
		t.Fatal(err)
	}
	damaged := 0
	filepath.WalkDir(corrupt, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".ltx") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i := len(b) / 3; i < len(b)/3+64 && i < len(b); i++ {
			b[i] ^= 0xff
		}
		damaged++
		return os.WriteFile(p, b, 0o600)
	})
	if damaged == 0 {
		t.Fatal("the replica has no .ltx files to damage")
	}
	bad := filepath.Join(dir, "from-corrupt.db")
	out, err = restoreCLI("--from", "file://"+corrupt, "--to", bad)
	if err == nil {
		t.Errorf("restore from a corrupted replica succeeded: %s", out)
	}
	t.Logf("a corrupted replica: %s", strings.TrimSpace(out))

	for _, p := range []string{missing, bad} {
		for _, f := range []string{p, p + "-wal", p + "-shm"} {
			if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused restore left %s: %v", f, err)
			}
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".oncepay-restore-") {
			t.Errorf("a refused restore left %s", e.Name())
		}
	}
}

// A stop (SIGTERM) ships the last writes to the replica before the process
// exits: with syncs an hour apart, the replica holds the payments made
// since the first only because of the one at shutdown.
func TestStopShipsLastWrites(t *testing.T) {
	dir := t.TempDir()
	sim, ledger := startSim(t, dir, 0)
	db := filepath.Join(dir, "oncepay.db")
	m := createAPIKey(t, db)
	replicaURL := "file://" + filepath.Join(dir, "replica")
	srv := startServe(t, db, sim.url, slowBank, nil, "--replica", replicaURL, "--replica-sync-interval", "1h", "--replica-max-lag", "2h")
	c := newClient()
	for i := range 5 {
		if r := mustPay(t, c, srv.url, m, newIntent(fmt.Sprintf("last-%d", i), 500, "tok_visa")); r.status != 201 {
			t.Fatalf("pay: %v", r)
		}
	}
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if srv.exit(t, 30*time.Second) {
		t.Fatalf("serve was killed, want it to stop:\n%s", srv.logs)
	}
	to := filepath.Join(t.TempDir(), "restored.db")
	if out, err := restoreCLI("--from", replicaURL, "--to", to); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	if n := readBooks(t, to, ledger).count("succeeded"); n != 5 {
		t.Errorf("the replica holds %d of the 5 payments made before the stop, want all", n)
	}
}
