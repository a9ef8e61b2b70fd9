package pgstore

import (
	"testing"

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
