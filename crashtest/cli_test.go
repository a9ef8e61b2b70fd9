package crashtest

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// reconciled is what "oncepay reconcile" said it did.
type reconciled struct {
	line                                       string
	stale, succeeded, failed, unknown, skipped int
}

func (r reconciled) String() string { return r.line }

// reconcile runs "oncepay reconcile" once against db and the provider at
// simURL, and parses its one-line summary.
func reconcile(t *testing.T, db, simURL string, tm timing) reconciled {
	t.Helper()
	out := runCLI(t, append([]string{"reconcile", "--db", db, "--provider", simURL}, tm.flags()...)...)
	r := reconciled{line: out[:max(0, len(out)-1)]}
	_, err := fmt.Sscanf(out, "reconcile: %d stale, %d succeeded, %d failed (not completed), %d still unknown, %d skipped\n",
		&r.stale, &r.succeeded, &r.failed, &r.unknown, &r.skipped)
	if err != nil || r.line+"\n" != out {
		t.Fatalf("reconcile printed %q, want one summary line (%v)", out, err)
	}
	return r
}

var purged = regexp.MustCompile(`\Apurge: deleted (\d+) final attempts last updated before \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ( \(\d+ batches, the longest [0-9.]+(ns|µs|ms|s)\))?\n\z`)

// "oncepay reconcile" and "oncepay purge" each run one pass and print one
// line saying what they did: purge never touches an attempt in progress,
// reconcile settles abandoned ones by what the provider says, and then
// purge deletes them once past the retention.
func TestReconcileAndPurgeSummaries(t *testing.T) {
	dir := t.TempDir()
	sim, _ := startSim(t, dir, 0)
	db := filepath.Join(dir, "oncepay.db")
	m := createAPIKey(t, db)
	// Two payments abandoned by a crash: one before the provider was
	// called, one after it charged.
	abandon(t, db, sim.url, m, "after-claim")
	abandon(t, db, sim.url, m, "after-charge")

	purge := func(wantDeleted string) {
		t.Helper()
		out := runCLI(t, "purge", "--db", db, "--retention", "1ms")
		if got := purged.FindStringSubmatch(out); got == nil || got[1] != wantDeleted {
			t.Errorf("purge printed %q, want one line: purge: deleted %s final attempts last updated before <RFC 3339 time>", out, wantDeleted)
		}
	}
	purge("0") // both are in progress, however old

	fast.expired()
	got := reconcile(t, db, sim.url, fast)
	want := reconciled{line: got.line, stale: 2, succeeded: 1, failed: 1}
	if got != want {
		t.Errorf("reconcile = %q, want 2 stale, 1 succeeded, 1 failed, 0 unknown, 0 skipped", got)
	}
	if got := reconcile(t, db, sim.url, fast); got.stale != 0 {
		t.Errorf("second reconcile = %q, want 0 stale", got)
	}

	time.Sleep(10 * time.Millisecond) // past the 1ms retention
	purge("2")
}

// abandon pays once against a server that the crash point kills on the
// way, leaving the payment in progress; it returns the payment.
func abandon(t *testing.T, db, simURL string, m merchant, point string) *intent {
	t.Helper()
	srv := startServe(t, db, simURL, fast, crashEnv(point, 1))
	in := newIntent("abandoned-"+point, 1000, "tok_visa")
	if r, err := pay(newClient(), srv.url, m, in); err == nil {
		t.Fatalf("%s: answer = %v, want none: the crash point kills first", point, r)
	}
	if !srv.exit(t, 10*time.Second) {
		t.Fatalf("%s: server exited with %v, want SIGKILL", point, srv.err)
	}
	return in
}

// Reconcile settles an attempt by asking the provider that served it. Run
// without --provider (a systemd timer missing ONCEPAY_PROVIDER) against a
// database a sim-provider process served, it must not ask a fresh, empty
// in-process simulator instead and settle a charged payment as "not
// completed": the client would start a new intent and pay twice. Refusing
// to run and leaving the attempt alone are both right.
func TestReconcileWithoutProviderGuessesNothing(t *testing.T) {
	dir := t.TempDir()
	sim, ledger := startSim(t, dir, 0)
	db := filepath.Join(dir, "oncepay.db")
	m := createAPIKey(t, db)
	in := abandon(t, db, sim.url, m, "after-charge")
	fast.expired()

	cmd := exec.Command(oncepay, append([]string{"reconcile", "--db", db}, fast.flags()...)...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	b := readBooks(t, db, ledger)
	dk := payment.DownstreamKey(m.scope, in.key)
	if a, ch := b.attempts[dk], b.charges[dk]; a.status == "failed" {
		t.Errorf("reconcile without --provider (exit %v) settled key %s as failed, but the ledger charged it (%s):\n%s",
			err, in.key, ch.id, out)
	}
}
