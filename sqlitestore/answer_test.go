package sqlitestore

import (
	"bytes"
	"context"
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
	if ok, err := db.Record(ctx, payment.KindPayment, "s", "k", a.Fence, o, t0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	check("succeeded")
}

// A final answer read once is answered from memory (package replaycache):
// a row deleted behind the cache's back, by no purge, is still answered.
// TestContract/ReplaysSeePurges has what a purge does to it.
func TestReplaysAnsweredFromMemory(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		opts   Options
		cached bool
	}{{Options{}, true}, {Options{ReplayCacheBytes: -1}, false}} {
		db := MustOpen(t, c.opts)
		a := newAttempt("k", t0, time.Minute)
		if ok, err := db.Claim(ctx, a); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if ok, err := db.Record(ctx, payment.KindPayment, "s", "k", 1, payment.SucceededOutcome(*a, payment.Charge{ID: "ch_1"}), t0); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if _, err := db.Answer(ctx, "s", "k"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.w.ExecContext(ctx, `DELETE FROM payment_attempts`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Answer(ctx, "s", "k"); (err == nil) != c.cached {
			t.Errorf("ReplayCacheBytes %d: Answer after the row is gone = %v, want answered %v", c.opts.ReplayCacheBytes, err, c.cached)
		}
	}
}
