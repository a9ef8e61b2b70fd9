package crashtest

import (
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var purgeDeleted = regexp.MustCompile(`purge: deleted (\d+) final attempts`)

// Reconcile and purge every second, purge really deleting (1s retention),
// under 50 clients paying as fast as they can: not one 5xx. The provider is
// healthy, so not even a 503 outcome-unknown is legitimate.
func TestBusyDatabase(t *testing.T) {
	const clients = 50
	d := busyFor
	if testing.Short() {
		d = 5 * time.Second
	}
	dir := t.TempDir()
	sim, ledger := startSim(t, dir, 0)
	db := filepath.Join(dir, "oncepay.db")
	m := createAPIKey(t, db)
	// Production timeouts: under this load a provider call may take a while,
	// and that is not what this test is about.
	prod := timing{providerTimeout: 10 * time.Second, lease: 30 * time.Second, staleAfter: time.Minute}
	srv := startServe(t, db, sim.url, prod, nil,
		"--reconcile-schedule", "@every 1s", "--purge-schedule", "@every 1s", "--retention", "1s")
	c := newClient()

	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		purged   int // replays that found their key purged and paid anew
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(deadline); n++ {
				source, want := "tok_visa", http.StatusCreated
				if n%10 == 9 {
					source, want = "tok_chargeDeclined", http.StatusPaymentRequired
				}
				in := newIntent(fmt.Sprintf("client%d-intent%d", i, n), 100+n, source)
				first, err := pay(c, srv.url, m, in)
				if err != nil {
					t.Errorf("key %s: %v", in.key, err)
					return
				}
				replay, err := pay(c, srv.url, m, in)
				if err != nil {
					t.Errorf("key %s: replay: %v", in.key, err)
					return
				}
				for _, r := range []reply{first, replay} {
					if r.status != want {
						t.Errorf("key %s: answer = %v, want %d", in.key, r, want)
					}
				}
				// A replay more than the 1s retention later finds the key
				// purged and is a new payment; any other must be the same bytes.
				fresh := replay.header.Get("Idempotent-Replayed") != "true"
				if !fresh && !replay.same(first) {
					t.Errorf("key %s: replay = %v, want the first answer %v", in.key, replay, first)
				}
				mu.Lock()
				statuses[first.status]++
				statuses[replay.status]++
				if fresh {
					purged++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	fivexx := 0
	for status, n := range statuses {
		if status >= 500 {
			fivexx += n
		}
	}
	if fivexx != 0 {
		t.Errorf("5xx answers = %d, want 0", fivexx)
	}
	srv.kill(t) // and so every line it logged is in
	reconciles, purges, deleted := 0, 0, 0
	for _, line := range strings.Split(srv.logs.String(), "\n") {
		switch {
		case strings.Contains(line, `"msg":"job failed"`):
			t.Errorf("a job failed: %s", line)
		case !strings.Contains(line, `"msg":"job done"`):
		case strings.Contains(line, `"job":"reconcile"`):
			reconciles++
		case strings.Contains(line, `"job":"purge"`):
			purges++
			if m := purgeDeleted.FindStringSubmatch(line); m != nil {
				n, _ := strconv.Atoi(m[1]) // the pattern matched digits
				deleted += n
			}
		}
	}
	// Every second, so all but a few of the runs must have happened; purge
	// must have found work, or the test proves nothing.
	minRuns := int(d/time.Second) - 3
	if reconciles < minRuns || purges < minRuns {
		t.Errorf("runs = %d reconcile, %d purge, want at least %d each", reconciles, purges, minRuns)
	}
	if deleted == 0 {
		t.Errorf("purge deleted 0 attempts, want some: retention is 1s")
	}
	b := readBooks(t, db, ledger)
	checkIntegrity(t, db, ledger)
	t.Logf("%v with %d clients: answers %v (%d replays found their key purged); %d reconcile and %d purge runs deleting %d attempts; left: %v",
		d, clients, statuses, purged, reconciles, purges, deleted, b)
}
