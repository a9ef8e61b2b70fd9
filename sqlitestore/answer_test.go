package sqlitestore

import (
	"path/filepath"

	"bytes"
	"context"
	"github.com/oncepay/oncepay/internal/replaycache"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// Answer reads the same fields Attempt does, in progress and final.
func TestAnswerMatchesAttempt(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t, Options{})
	if _, err := db.Answer(ctx, "s", "k"); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Fatalf("Answer of no attempt: %v, want %s", err, payment.ENOTFOUND)
	}
	a := newAttempt("k", t0, time.Minute)
	if ok, err := db.Claim(ctx, a); !ok || err != nil {
		t.Fatal(ok, err)
	}
	check := func(when string) {
		t.Helper()
		full, err := db.Attempt(ctx, "s", "k")
		if err != nil {
			t.Fatal(err)
		}
		got, err := db.Answer(ctx, "s", "k")
		if err != nil {
			t.Fatal(err)
		}
		want := payment.Answer{RequestHash: full.RequestHash, Status: full.Status, LeaseExpiresAt: full.LeaseExpiresAt,
			ResponseStatus: full.ResponseStatus, ResponseBody: full.ResponseBody}
		if !bytes.Equal(got.RequestHash, want.RequestHash) || got.Status != want.Status || !got.LeaseExpiresAt.Equal(want.LeaseExpiresAt) ||
			got.ResponseStatus != want.ResponseStatus || !bytes.Equal(got.ResponseBody, want.ResponseBody) {
			t.Errorf("%s: Answer = %+v, want %+v", when, *got, want)
		}
	}
	check("in progress")
	o := payment.SucceededOutcome(*a, payment.Charge{ID: "ch_1"})
	if ok, err := db.Record(ctx, "s", "k", a.Fence, o, t0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	check("succeeded")
}

// Replays are answered from memory once final (package replaycache), and a
// purge is seen all the same: at once when made through this store, within
// replaycache.TTL when made by another process on the same file.
func TestReplayCacheSeesPurges(t *testing.T) {
	ctx := context.Background()
	now := t0
	clock := func() time.Time { return now }
	path := filepath.Join(t.TempDir(), "oncepay.db")
	db := mustOpenPath(t, path, Options{Now: clock})
	other := mustOpenPath(t, path, Options{Now: clock}) // another process
	settle := func(key string) {
		t.Helper()
		a := newAttempt(key, t0, time.Minute)
		if ok, err := db.Claim(ctx, a); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if ok, err := db.Record(ctx, "s", key, 1, payment.SucceededOutcome(*a, payment.Charge{ID: "ch_" + key}), t0); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if _, err := db.Answer(ctx, "s", key); err != nil { // now cached
			t.Fatal(err)
		}
	}
	answered := func(key string) bool {
		t.Helper()
		_, err := db.Answer(ctx, "s", key)
		if err != nil && payment.ErrorCode(err) != payment.ENOTFOUND {
			t.Fatal(err)
		}
		return err == nil
	}

	settle("k1")
	// The row is gone behind the cache's back (no purge, no version): the
	// answer comes from memory.
	if _, err := other.w.ExecContext(ctx, `DELETE FROM payment_attempts WHERE idempotency_key = 'k1'`); err != nil {
		t.Fatal(err)
	}
	if !answered("k1") {
		t.Fatal("a final answer read once was read again: no cache")
	}

	settle("k2")
	if n, err := db.Purge(ctx, t0.Add(time.Second), 10); n != 1 || err != nil {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	if answered("k2") || answered("k1") {
		t.Fatal("answered after a purge through this store")
	}

	settle("k3")
	if n, err := other.Purge(ctx, t0.Add(time.Second), 10); n != 1 || err != nil {
		t.Fatalf("Purge by another process = %d, %v", n, err)
	}
	now = now.Add(replaycache.TTL)
	if answered("k3") {
		t.Fatalf("answered %s after another process purged", replaycache.TTL)
	}
}
