package pgstore

import (
	"context"
	"testing"

	"github.com/oncepay/oncepay/internal/pgtest"
	"github.com/oncepay/oncepay/internal/storetest"
	"github.com/oncepay/oncepay/payment"
)

// A fill's expired keys are refused to a late retry, whether it finished
// or was stopped (the store contract's storetest.Fill).
func TestFill(t *testing.T) {
	storetest.Fill(t, func(t *testing.T) (payment.Filler, func() payment.Database) {
		url := pgtest.URL(t)
		db := mustOpenURL(t, url, Options{})
		return db, func() payment.Database {
			db.Close()
			return mustOpenURL(t, url, Options{})
		}
	})
}

// The move drops expired_keys' index by payment and its foreign key, for
// speed; once it is done both are there again.
func TestFinishFillKeepsTheIndexAndForeignKey(t *testing.T) {
	db := mustOpenURL(t, pgtest.URL(t), Options{})
	storetest.FillFinished(t, db)
	var fk, index, staged int
	err := db.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_constraint WHERE conname = 'expired_keys_payment_id_fkey'),
		(SELECT count(*) FROM pg_indexes WHERE indexname = 'expired_keys_payment'),
		(SELECT count(*) FROM pg_class WHERE relname = 'fill_expired_keys')`).Scan(&fk, &index, &staged)
	if err != nil || fk != 1 || index != 1 || staged != 0 {
		t.Errorf("after FinishFill: foreign key %d, index %d, stage %d, %v; want 1, 1, 0", fk, index, staged, err)
	}
}
