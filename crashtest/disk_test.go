package crashtest

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// diskFull is what SQLite says on SQLITE_FULL; the server logs it with its
// "unavailable" warning, which proves a test hit a full disk and not
// something else that also answers 503.
const diskFull = "database or disk is full"

// mountTmpfs mounts a tmpfs of size (mount's syntax: "2m") for the test and
// unmounts it at the end, after the children using it are killed. It skips
// the test where mounting is not allowed, except in CI, which runs as root:
// there a test never skips for want of a tool.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot mount a tmpfs: %v %s", err, out)
		}
		t.Skipf("cannot mount a tmpfs (needs root): %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// fillDisk writes a file in dir until the file system is full and returns
// the function that frees the space again.
func fillDisk(t *testing.T, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Whole pages, so no partly used page is left for SQLite to write into.
	page := make([]byte, 4096)
	for i := 0; ; i++ {
		_, err := f.Write(page)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i > 1<<16 { // 256 MiB: the tmpfs is far smaller
			t.Fatal("the disk never filled up")
		}
	}
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// A full disk at the claim: 503 service-unavailable with Retry-After, the
// provider never called, earlier payments still replayed; once there is
// space, the same key pays, since the failed claim consumed nothing.
func TestFullDiskAtClaim(t *testing.T) {
	disk := mountTmpfs(t, "2m")
	dir := t.TempDir()
	sim, ledger := startSim(t, dir, 0)
	// A fresh database: its write-ahead log must grow for every commit,
	// where an old one could reuse space it already has.
	db := filepath.Join(disk, "oncepay.db")
	m := createAPIKey(t, db)
	srv := startServe(t, db, sim.url, fast, nil)
	c := newClient()

	var earlier []*intent
	for _, key := range []string{"before-1", "before-2", "before-3"} {
		in := newIntent(key, 1000, "tok_visa")
		r := mustPay(t, c, srv.url, m, in)
		if r.status != http.StatusCreated {
			t.Fatalf("key %s: answer = %v, want 201", key, r)
		}
		in.settle(t, r)
		earlier = append(earlier, in)
	}
	charged := len(readBooks(t, db, ledger).charges)

	free := fillDisk(t, disk)
	in := newIntent("while-full", 2000, "tok_visa")
	wantProblem(t, mustPay(t, c, srv.url, m, in), http.StatusServiceUnavailable, "/problems/service-unavailable", true)
	if !srv.logged(`"msg":"unavailable"`, diskFull) {
		t.Errorf("server log lacks the unavailable warning with %q:\n%s", diskFull, srv.logs)
	}
	b := readBooks(t, db, ledger)
	if got := len(b.charges); got != charged {
		t.Errorf("ledger charges = %d, want %d: a failed claim must not call the provider", got, charged)
	}
	if _, ok := b.attempts[payment.DownstreamKey(m.scope, in.key)]; ok {
		t.Errorf("key %s: a row exists after its claim failed", in.key)
	}
	for _, e := range earlier { // reads need no space
		if r := mustPay(t, c, srv.url, m, e); !r.same(*e.final) || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("key %s on a full disk: answer = %v, want the replay of %v", e.key, r, *e.final)
		}
	}

	free()
	if r := mustPay(t, c, srv.url, m, in); r.status != http.StatusCreated {
		t.Errorf("key %s with space again: answer = %v, want 201", in.key, r)
	}
	t.Logf("at the claim: %v", checkBooks(t, db, ledger))
}

// A full disk at the record: the provider charged while the disk filled,
// so the record fails. 503 service-unavailable, the row left in progress
// with the charge at the provider, earlier payments still replayed; with
// space again, reconcile records the ledger's charge and the client's retry
// gets it.
func TestFullDiskAtRecord(t *testing.T) {
	disk := mountTmpfs(t, "2m")
	dir := t.TempDir()
	// The provider takes 500ms, time enough to fill the disk between the
	// claim and the record.
	sim, ledger := startSim(t, dir, 500*time.Millisecond)
	db := filepath.Join(disk, "oncepay.db")
	m := createAPIKey(t, db)
	tm := timing{providerTimeout: time.Second, lease: 1500 * time.Millisecond, staleAfter: 1500 * time.Millisecond}
	srv := startServe(t, db, sim.url, tm, nil)
	c := newClient()

	earlier := newIntent("before", 1000, "tok_visa")
	earlier.settle(t, mustPay(t, c, srv.url, m, earlier))
	if earlier.final.status != http.StatusCreated {
		t.Fatalf("key %s: answer = %v, want 201", earlier.key, *earlier.final)
	}

	in := newIntent("record-on-full-disk", 2000, "tok_visa")
	type result struct {
		r   reply
		err error
	}
	answer := make(chan result, 1) // never blocks: the goroutine outlives a failed test
	go func() {
		r, err := pay(c, srv.url, m, in)
		answer <- result{r, err}
	}()
	// Once the claim is committed the provider call is under way. (Asking
	// with a duplicate request could claim the key itself.)
	dk := payment.DownstreamKey(m.scope, in.key)
	for i := 0; readBooks(t, db, ledger).attempts[dk].status != "in_progress"; i++ {
		if i == 200 {
			t.Fatalf("key %s: no claim in progress after 200 looks", in.key)
		}
		time.Sleep(5 * time.Millisecond)
	}
	free := fillDisk(t, disk)
	res := <-answer
	if res.err != nil {
		t.Fatalf("key %s: %v", in.key, res.err)
	}
	wantProblem(t, res.r, http.StatusServiceUnavailable, "/problems/service-unavailable", true)
	if !srv.logged(`"msg":"unavailable"`, diskFull) {
		t.Fatalf("server log lacks the unavailable warning with %q, so the record did not hit the full disk:\n%s", diskFull, srv.logs)
	}
	b := readBooks(t, db, ledger)
	if _, ok := b.charges[dk]; !ok {
		t.Errorf("key %s: no ledger charge, want the one the provider made before the record failed", in.key)
	}
	if got := b.attempts[dk].status; got != "in_progress" {
		t.Errorf("key %s: status = %q, want in_progress, left for reconcile", in.key, got)
	}
	if r := mustPay(t, c, srv.url, m, earlier); !r.same(*earlier.final) {
		t.Errorf("key %s on a full disk: answer = %v, want the replay of %v", earlier.key, r, *earlier.final)
	}

	free()
	tm.expired()
	if got := reconcile(t, db, sim.url, tm); got.stale != 1 || got.succeeded != 1 {
		t.Errorf("reconcile = %q, want 1 stale, 1 succeeded", got)
	}
	b = checkBooks(t, db, ledger)
	if got, want := b.attempts[dk].chargeID, b.charges[dk].id; got != want {
		t.Errorf("key %s: charge_id = %q, want the ledger's %q", in.key, got, want)
	}
	if kinds := checkAnswers(t, c, srv.url, m, []*intent{in, earlier}, b); kinds["charged"] != 2 {
		t.Errorf("retries = %v, want 2 charged", kinds)
	}
	// The write path works again after the failed commit.
	after := newIntent("after", 3000, "tok_visa")
	if r := mustPay(t, c, srv.url, m, after); r.status != http.StatusCreated {
		t.Errorf("key %s with space again: answer = %v, want 201", after.key, r)
	}
	t.Logf("at the record: %v", checkBooks(t, db, ledger))
}
