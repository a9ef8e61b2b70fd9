package sqlitestore

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/oncepay/oncepay/internal/storetest"
	"github.com/oncepay/oncepay/payment"
)

// A fill's expired keys are refused to a late retry, whether it finished
// or was stopped (the store contract's storetest.Fill).
func TestFill(t *testing.T) {
	storetest.Fill(t, func(t *testing.T) (payment.Filler, func() payment.Database) {
		path := filepath.Join(t.TempDir(), "filled.db")
		db := mustOpenPath(t, path, Options{BulkLoad: true})
		return db, func() payment.Database {
			db.Close()
			return mustOpenPath(t, path, Options{})
		}
	})
}

// Once a fill is finished its stage is gone, its pages given back (no free
// page left in the file), and expired_keys has its index by payment again
// (the move drops it, to make it by a sort after), holding every key.
func TestFinishFillKeepsTheIndex(t *testing.T) {
	db := mustOpenPath(t, filepath.Join(t.TempDir(), "filled.db"), Options{BulkLoad: true})
	expired := storetest.FillFinished(t, db)
	var staged, indexed int
	err := db.w.QueryRowContext(context.Background(), `SELECT (SELECT count(*) FROM sqlite_master WHERE name = 'fill_expired_keys'),
		(SELECT count(*) FROM expired_keys INDEXED BY expired_keys_payment WHERE payment_id >= '')`).Scan(&staged, &indexed)
	if err != nil || staged != 0 || indexed != expired {
		t.Errorf("after FinishFill: stage tables %d, keys by payment %d, %v; want 0, %d", staged, indexed, err, expired)
	}
	if free := pragma(t, db, "freelist_count"); free != 0 {
		t.Errorf("after FinishFill: %d free pages, want the stage's given back", free)
	}
}
