package sqlitestore

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// The fill's expired keys reach expired_keys, whether the fill finished
// (FinishFill) or was stopped before (the next Open moves them), and once
// there a late retry of one is refused as expired, never claimed; the
// stage is gone and expired_keys keeps its index by payment.
func TestFillMovesItsExpiredKeys(t *testing.T) {
	ctx := context.Background()
	const n, live = 300, 40
	f := &payment.Fill{Now: time.Now(), Payments: n, LiveKeys: live, Merchants: []string{"s"},
		Retention: 24 * time.Hour, Span: 30 * 24 * time.Hour, Provider: "sim"}
	// The payments past the retention, and the refunds of every tenth.
	want := n - live
	for i := range n - live {
		if i%10 == 3 {
			want++
		}
	}
	count := func(db *DB, q string) int {
		t.Helper()
		var v int
		if err := db.w.QueryRowContext(ctx, q).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, finish := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "filled.db")
		db := mustOpenPath(t, path, Options{BulkLoad: true})
		for from := 0; from < n; from += 64 {
			s, err := f.Batch(from, min(from+64, n))
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Fill(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		if got := count(db, `SELECT count(*) FROM fill_expired_keys`); got != want {
			t.Fatalf("staged keys = %d, want %d", got, want)
		}
		if finish {
			if err := db.FinishFill(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			db.Close()
			db = mustOpenPath(t, path, Options{})
		}
		if got := count(db, `SELECT count(*) FROM expired_keys`); got != want {
			t.Errorf("finished %v: expired keys = %d, want %d", finish, got, want)
		}
		if got := count(db, `SELECT count(*) FROM sqlite_master WHERE name = 'fill_expired_keys'`); got != 0 {
			t.Errorf("finished %v: the stage is still there", finish)
		}
		if got := count(db, `SELECT count(*) FROM expired_keys INDEXED BY expired_keys_payment WHERE payment_id >= ''`); got != want {
			t.Errorf("finished %v: expired_keys_payment holds %d keys, want %d", finish, got, want)
		}
		req, err := payment.ParseRequest(payment.FillRequest(3))
		if err != nil {
			t.Fatal(err)
		}
		late := payment.NewAttempt("s", payment.FillKey(3), req, time.Now(), time.Minute)
		if ok, err := db.Claim(ctx, &late); ok || payment.ErrorCode(err) != payment.EKEYEXPIRED {
			t.Errorf("finished %v: late retry of a filled old key = %v, %v, want refused as expired", finish, ok, err)
		}
		db.Close()
	}
}
