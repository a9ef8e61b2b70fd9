package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/pgtest"
	"github.com/oncepay/oncepay/internal/storetest"
	"github.com/oncepay/oncepay/payment"
)

// A fill's expired keys are refused to a late retry, whether it finished
// or was stopped (the store contract's storetest.Fill).
func TestFill(t *testing.T) {
	storetest.Fill(t, func(t *testing.T) (storetest.Filler, func() payment.Database) {
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
	ctx := context.Background()
	db := mustOpenURL(t, pgtest.URL(t), Options{})
	f := &payment.Fill{Now: time.Now(), Payments: 100, Merchants: []string{"s"},
		Retention: 24 * time.Hour, Span: 30 * 24 * time.Hour, Provider: "sim"}
	s, err := f.Batch(0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Fill(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := db.FinishFill(ctx); err != nil {
		t.Fatal(err)
	}
	var fk, index, staged int
	err = db.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_constraint WHERE conname = 'expired_keys_payment_id_fkey'),
		(SELECT count(*) FROM pg_indexes WHERE indexname = 'expired_keys_payment'),
		(SELECT count(*) FROM pg_class WHERE relname = 'fill_expired_keys')`).Scan(&fk, &index, &staged)
	if err != nil || fk != 1 || index != 1 || staged != 0 {
		t.Errorf("after FinishFill: foreign key %d, index %d, stage %d, %v; want 1, 1, 0", fk, index, staged, err)
	}
}
