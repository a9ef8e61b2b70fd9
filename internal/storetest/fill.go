package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// Fill checks that every key a fill expired is refused to a late retry,
// as expired and naming its payment, whether the fill finished or was
// stopped before FinishFill and the database opened again, and that a key
// it kept still replays. open returns a store on a fresh database and a
// way to close it and open that database again.
func Fill(t *testing.T, open func(t *testing.T) (db payment.Filler, reopen func() payment.Database)) {
	ctx := context.Background()
	const n, live = 300, 40
	f := fillOf(n, live)
	for _, finish := range []bool{true, false} {
		filler, reopen := open(t)
		if err := filler.BindProvider(ctx, "sim"); err != nil {
			t.Fatal(err)
		}
		ids := map[int]string{}
		for from := 0; from < n; from += 64 {
			s, err := f.Batch(from, min(from+64, n))
			if err != nil {
				t.Fatal(err)
			}
			for k, p := range s.Payments {
				ids[from+k] = p.ID
			}
			if err := filler.Fill(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		var db payment.Database = filler
		if finish {
			if err := filler.FinishFill(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			db = reopen()
		}
		for i := range n - live {
			req, err := payment.ParseRequest(payment.FillRequest(i))
			if err != nil {
				t.Fatal(err)
			}
			late := payment.NewAttempt("s", payment.FillKey(i), req, time.Now(), time.Minute)
			ok, err := db.Claim(ctx, &late)
			var pe *payment.Error
			if ok || payment.ErrorCode(err) != payment.EKEYEXPIRED || !errors.As(err, &pe) || pe.PaymentID != ids[i] {
				t.Fatalf("finished %v: late retry of filled old key %d = %v, %v, want refused as expired naming %s", finish, i, ok, err, ids[i])
			}
		}
		if a, err := db.Attempt(ctx, "s", payment.FillKey(n-1)); err != nil || a.ID != ids[n-1] {
			t.Errorf("finished %v: the newest filled key = %+v, %v, want its record", finish, a, err)
		}
	}
}

// fillOf is a fill of n payments of merchant "s" over 30 days, the newest
// live within the retention.
func fillOf(n, live int) *payment.Fill {
	return &payment.Fill{Now: time.Now(), Payments: n, LiveKeys: live, Merchants: []string{"s"},
		Retention: 24 * time.Hour, Span: 30 * 24 * time.Hour, Provider: "sim"}
}

// FillFinished fills db with 100 payments past the retention in one batch
// and finishes the fill; it returns how many keys the fill expired (the
// payments' and their refunds').
func FillFinished(t *testing.T, db payment.Filler) int {
	t.Helper()
	ctx := context.Background()
	s, err := fillOf(100, 0).Batch(0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Fill(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := db.FinishFill(ctx); err != nil {
		t.Fatal(err)
	}
	return len(s.Payments) + len(s.Refunds)
}
