package sqlitestore

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// pragma reads one integer PRAGMA of db's file.
func pragma(t *testing.T, db *DB, name string) int64 {
	t.Helper()
	var v int64
	if err := db.w.QueryRowContext(context.Background(), `PRAGMA `+name).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// fillUnpurged appends n payments whose keys' records are past the
// retention and not purged yet, each with a few kilobytes of rows.
func fillUnpurged(t *testing.T, db *DB, n int) {
	t.Helper()
	f := &payment.Fill{Now: time.Now(), Payments: n, Unpurged: n, Merchants: []string{"s"},
		Retention: 24 * time.Hour, Span: 30 * 24 * time.Hour, Provider: "sim"}
	for from := 0; from < n; from += 500 {
		s, err := f.Batch(from, min(from+500, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Fill(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
}

// purgeAll purges every record past the retention, batch by batch.
func purgeAll(t *testing.T, db *DB) int {
	t.Helper()
	total := 0
	for {
		n, _, err := db.Purge(context.Background(), time.Now().Add(-24*time.Hour), 500)
		if err != nil {
			t.Fatal(err)
		}
		if total += n; n < 500 {
			return total
		}
	}
}

// A new file gives back what its purges free: auto_vacuum is INCREMENTAL
// from the start, and a purge of many records leaves it smaller.
func TestNewFileShrinksWithItsPurges(t *testing.T) {
	db := MustOpen(t, Options{})
	if got := pragma(t, db, "auto_vacuum"); got != autoVacuumIncremental {
		t.Fatalf("auto_vacuum of a new file = %d, want %d (INCREMENTAL)", got, autoVacuumIncremental)
	}
	if ok, err := db.Incremental(context.Background()); !ok || err != nil {
		t.Errorf("Incremental = %v, %v, want true", ok, err)
	}
	fillUnpurged(t, db, 3000)
	before := pragma(t, db, "page_count")
	if n := purgeAll(t, db); n != 3300 {
		t.Fatalf("purged %d records, want 3,300 (3,000 payments' and 300 refunds')", n)
	}
	after, free := pragma(t, db, "page_count"), pragma(t, db, "freelist_count")
	if after >= before*3/4 || free != 0 {
		t.Errorf("pages after the purge = %d (%d free), before %d: want the file a quarter smaller at least, nothing left free", after, free, before)
	}
}

// A purge batch gives no page back in its own transaction, whose time
// would grow with every page moved: they are given back after it, freeStep
// at a time, each step a write of its own, until none is free.
func TestPurgeGivesPagesBackInSteps(t *testing.T) {
	db := MustOpen(t, Options{})
	fillUnpurged(t, db, 2000)
	before := pragma(t, db, "page_count")
	commits, _ := db.WriteStats()
	if n, _, err := db.Purge(context.Background(), time.Now().Add(-24*time.Hour), 2000); n != 2000 || err != nil {
		t.Fatalf("Purge = %d, %v, want 2,000", n, err)
	}
	after, _ := db.WriteStats()
	freed := before - pragma(t, db, "page_count")
	if freed <= 2*freeStep || pragma(t, db, "freelist_count") != 0 {
		t.Fatalf("pages given back = %d, %d left free: want more than %d, none left", freed, pragma(t, db, "freelist_count"), 2*freeStep)
	}
	if got, want := after-commits, 1+(freed+freeStep-1)/freeStep; got != want {
		t.Errorf("writes of the purge = %d, want %d: the batch, then a step for every %d of the %d pages it freed", got, want, freeStep, freed)
	}
}

// A file made by today's schema before auto_vacuum was set (NONE) keeps
// its size through a purge, and says so; Vacuum makes it INCREMENTAL,
// keeps every row, and from then on its purges shrink it.
func TestVacuumMigratesAnOlderFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	schema, err := os.ReadFile("../schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(string(schema)); err != nil {
		t.Fatal(err)
	}
	old.Close()
	db := mustOpenPath(t, path, Options{})
	ctx := context.Background()
	if ok, err := db.Incremental(ctx); ok || err != nil {
		t.Fatalf("Incremental of a file made without it = %v, %v, want false", ok, err)
	}
	fillUnpurged(t, db, 2000)
	db.Purge(ctx, time.Now().Add(-24*time.Hour), 500) // a quarter of them
	before := pragma(t, db, "page_count")
	if free := pragma(t, db, "freelist_count"); free == 0 {
		t.Fatalf("no free page after a purge on a NONE file: the test proves nothing")
	}
	var payments int
	db.r.QueryRow(`SELECT count(*) FROM payments`).Scan(&payments)
	sizeBefore, sizeAfter, err := db.Vacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Read on a new connection: one open before the VACUUM answers this
	// pragma from what it read last, until its next transaction.
	fresh, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	var got int64
	if err := fresh.QueryRow(`PRAGMA auto_vacuum`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != autoVacuumIncremental || sizeAfter >= sizeBefore {
		t.Errorf("after Vacuum: auto_vacuum %d, size %d from %d; want %d and smaller", got, sizeAfter, sizeBefore, autoVacuumIncremental)
	}
	var still int
	db.r.QueryRow(`SELECT count(*) FROM payments`).Scan(&still)
	if still != payments || pragma(t, db, "page_count") >= before {
		t.Errorf("after Vacuum: %d payments (want %d), %d pages (want fewer than %d)", still, payments, pragma(t, db, "page_count"), before)
	}
	// The store keeps writing through its own connections, and purges now
	// shrink the file.
	mid := pragma(t, db, "page_count")
	if n := purgeAll(t, db); n == 0 {
		t.Fatal("nothing left to purge")
	}
	if after := pragma(t, db, "page_count"); after >= mid || pragma(t, db, "freelist_count") != 0 {
		t.Errorf("pages after a purge once vacuumed = %d (%d free), before %d: want fewer, none free", after, pragma(t, db, "freelist_count"), mid)
	}
}

// The writer keeps each savepoint's journal in memory; Vacuum's and
// Backup's own connections do not, or their copy of the file would be
// built in memory.
func TestWriterJournalsInMemoryCopiesOnDisk(t *testing.T) {
	db := MustOpen(t, Options{})
	if got := pragma(t, db, "temp_store"); got != 2 {
		t.Errorf("the writer's temp_store = %d, want 2 (MEMORY)", got)
	}
	c, err := sql.Open(db.driver, db.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var v int
	if err := c.QueryRow(`PRAGMA temp_store`).Scan(&v); err != nil || v == 2 {
		t.Errorf("Vacuum's and Backup's temp_store = %d, %v; want not 2 (MEMORY)", v, err)
	}
}
