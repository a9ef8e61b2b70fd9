package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// The benchmarks run on a file in b.TempDir(), so TMPDIR decides the disk
// measured. They run 64 goroutines on two cores (SetParallelism), the
// load of oncepay bench: concurrency is what group commit batches.
const benchParallelism = 32

// writePaths are the two ways of committing the benchmarks compare.
var writePaths = []struct {
	name string
	opts Options
}{
	{"group", Options{}},
	{"per-request", Options{MaxBatch: 1}},
}

// reportBatch reports the mean number of writes per commit since the
// benchmark's start.
func reportBatch(b *testing.B, db *DB, commits0, writes0 int64) {
	commits, writes := db.WriteStats()
	if commits > commits0 {
		b.ReportMetric(float64(writes-writes0)/float64(commits-commits0), "writes/commit")
	}
}

// benchKeys hands out keys never used before in this process.
var benchKeys atomic.Int64

func nextKey() string { return "bench-" + strconv.FormatInt(benchKeys.Add(1), 10) }

// benchWrites runs write on fresh attempts from 64 goroutines under each
// write path, and reports the rate in unit and the mean batch.
func benchWrites(b *testing.B, unit string, write func(db *DB, a *payment.Attempt) error) {
	for _, wp := range writePaths {
		b.Run(wp.name, func(b *testing.B) {
			db := MustOpen(b, wp.opts)
			commits0, writes0 := db.WriteStats()
			cpu0 := cpuTime(b)
			b.SetParallelism(benchParallelism)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := write(db, newAttempt(nextKey(), time.Now(), time.Minute)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportBatch(b, db, commits0, writes0)
			reportRate(b, unit)
			// CPU per write: what a loaded machine, which slows the wall
			// clock of every write path alike, changes least.
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkClaim is the claim of a new payment: one INSERT OR IGNORE through
// the writer, durable before it returns.
func BenchmarkClaim(b *testing.B) {
	benchWrites(b, "claims/s", func(db *DB, a *payment.Attempt) error {
		if ok, err := db.Claim(context.Background(), a); !ok || err != nil {
			return fmt.Errorf("Claim = %v, %v", ok, err)
		}
		return nil
	})
}

// BenchmarkClaimRecord is a new payment's writes through the store: the claim
// and the record of its 201 with its event, the SQL ceiling of the HTTP
// path. "no-event" records no event, as before the outbox: one run shows
// what the event costs a new payment.
func BenchmarkClaimRecord(b *testing.B) {
	b.Run("event", func(b *testing.B) { benchWrites(b, "payments/s", claimRecord) })
	b.Run("no-event", func(b *testing.B) {
		benchWrites(b, "payments/s", func(db *DB, a *payment.Attempt) error { return claimRecordEvent(db, a, false) })
	})
}

func claimRecord(db *DB, a *payment.Attempt) error { return claimRecordEvent(db, a, true) }

// BenchmarkEventCost is what the outbox costs a new payment, measured on a
// loaded machine as fairly as it can be: payments with their event and
// without it, on one store, in alternating rounds (which goes first
// alternates too), so that whatever else the machine does slows both
// alike. It reports each one's rate and CPU per payment, and the ratios.
func BenchmarkEventCost(b *testing.B) {
	db := MustOpen(b, Options{})
	benchPair(b, [2]string{"no-event", "event"}, func(i int, a *payment.Attempt) error { return claimRecordEvent(db, a, i == 1) })
}

// benchPair runs b.N payments, pay(i, a) for i 0 and 1 in alternating
// rounds (which goes first alternates too), so that whatever else the
// machine does slows both alike; it reports each one's rate and CPU per
// payment under names[i], and the ratios of the second to the first.
func benchPair(b *testing.B, names [2]string, pay func(i int, a *payment.Attempt) error) {
	const round = 512
	var wall, cpu [2]time.Duration
	var n [2]int
	run := func(i, count int) {
		var next atomic.Int64
		start, cpu0 := time.Now(), cpuTime(b)
		var wg sync.WaitGroup
		for range 2 * benchParallelism {
			wg.Go(func() {
				for next.Add(1) <= int64(count) {
					if err := pay(i, newAttempt(nextKey(), time.Now(), time.Minute)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		wall[i] += time.Since(start)
		cpu[i] += cpuTime(b) - cpu0
		n[i] += count
	}
	for done, r := 0, 0; done < b.N; done, r = done+round, r+1 {
		count := min(round, b.N-done)
		run(r%2, count)
		run(1-r%2, count)
	}
	rate := func(i int) float64 { return float64(n[i]) / wall[i].Seconds() }
	perOp := func(i int) float64 { return float64(cpu[i].Microseconds()) / float64(n[i]) }
	b.ReportMetric(rate(0), names[0]+"-payments/s")
	b.ReportMetric(rate(1), names[1]+"-payments/s")
	b.ReportMetric(rate(1)/rate(0), "rate-ratio")
	b.ReportMetric(perOp(0), names[0]+"-cpu-µs/op")
	b.ReportMetric(perOp(1), names[1]+"-cpu-µs/op")
	b.ReportMetric(perOp(1)/perOp(0), "cpu-ratio")
}

// claimRecordEvent claims a and records its 201, with its event or not.
func claimRecordEvent(db *DB, a *payment.Attempt, event bool) error {
	ctx := context.Background()
	if ok, err := db.Claim(ctx, a); !ok || err != nil {
		return fmt.Errorf("Claim = %v, %v", ok, err)
	}
	o := payment.SucceededOutcome(*a, payment.Charge{ID: "ch_" + a.Key})
	if event {
		o.Event = payment.ChangeEvent(*a, o, time.Now())
	}
	if ok, err := db.Record(ctx, a.Kind, a.Scope, a.Key, a.Fence, o, time.Now()); !ok || err != nil {
		return fmt.Errorf("Record = %v, %v", ok, err)
	}
	return nil
}

// BenchmarkAttempt is the replay lookup: reading a final attempt by its key,
// as every retry does. "whole" reads every column from the read pool, as a
// takeover does; "answer-table" the five a replay is decided by, with no
// replay cache; "answer" the same through the cache, as serve does.
func BenchmarkAttempt(b *testing.B) {
	const keys = 1000
	db := MustOpen(b, Options{})
	uncached := MustOpen(b, Options{ReplayCacheBytes: -1})
	for i := range keys {
		for _, s := range []*DB{db, uncached} {
			if err := claimRecord(s, newAttempt("replay-"+strconv.Itoa(i), time.Now(), time.Minute)); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, bm := range []struct {
		name   string
		lookup func(ctx context.Context, key string) (payment.Status, error)
	}{
		{"whole", func(ctx context.Context, key string) (payment.Status, error) {
			a, err := db.Attempt(ctx, "s", key)
			if err != nil {
				return "", err
			}
			return a.Status, nil
		}},
		{"answer-table", answerStatus(uncached)},
		{"answer", answerStatus(db)},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.SetParallelism(benchParallelism)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					status, err := bm.lookup(context.Background(), "replay-"+strconv.Itoa(rand.IntN(keys)))
					if err != nil || status != payment.Succeeded {
						b.Errorf("lookup = %v, %v", status, err)
						return
					}
				}
			})
			reportRate(b, "lookups/s")
		})
	}
}

func answerStatus(db *DB) func(ctx context.Context, key string) (payment.Status, error) {
	return func(ctx context.Context, key string) (payment.Status, error) {
		a, err := db.Answer(ctx, "s", key)
		if err != nil {
			return "", err
		}
		return a.Status, nil
	}
}

// BenchmarkRawClaimRecord is the raw SQL ceiling: the attempts' claim and
// record statements alone (no payment row, no expired-key test; the
// record's settle trigger finds no payment) on the store's own writer connection (same file, same
// pragmas), without the writer goroutine, its savepoints or any caller
// waiting. A round commits batch claims, then their batch records, as group
// commit does at best; batch=1 is two commits a payment, as per-request
// commits do. "text" runs the SQL as the store does, parsed at every call;
// "prepared" parses it once, which shows what parsing costs.
func BenchmarkRawClaimRecord(b *testing.B) {
	const (
		claimSQL = `INSERT OR IGNORE INTO payment_attempts
			(scope, idempotency_key, id, request_hash, request, amount, currency,
			 status, fence, lease_expires_at, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
		recordSQL = `UPDATE payment_attempts
			SET status = ?, response_status = ?, response_body = ?, charge_id = ?,
			    failure_code = ?, lease_expires_at = NULL, updated_at = ?
			WHERE scope = ? AND idempotency_key = ? AND status = 'in_progress' AND fence = ?`
	)
	for _, batch := range []int{1, 256} {
		for _, prepared := range []bool{false, true} {
			mode := map[bool]string{false: "text", true: "prepared"}[prepared]
			b.Run(fmt.Sprintf("batch=%d/%s", batch, mode), func(b *testing.B) {
				ctx := context.Background()
				db := MustOpen(b, Options{})
				stmt := func(query string) func(tx *sql.Tx, args ...any) {
					var ps *sql.Stmt
					if prepared {
						var err error
						if ps, err = db.w.PrepareContext(ctx, query); err != nil {
							b.Fatal(err)
						}
						b.Cleanup(func() { ps.Close() })
					}
					return func(tx *sql.Tx, args ...any) {
						var err error
						if ps != nil {
							_, err = tx.StmtContext(ctx, ps).ExecContext(ctx, args...)
						} else {
							_, err = tx.ExecContext(ctx, query, args...)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				claim, record := stmt(claimSQL), stmt(recordSQL)
				inTx := func(n int, fn func(tx *sql.Tx, i int)) {
					tx, err := db.w.BeginTx(ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					for i := range n {
						fn(tx, i)
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				for done := 0; done < b.N; done += batch {
					now := time.Now()
					as := make([]*payment.Attempt, min(batch, b.N-done))
					inTx(len(as), func(tx *sql.Tx, i int) {
						a := newAttempt(nextKey(), now, time.Minute)
						as[i] = a
						claim(tx, a.Scope, a.Key, a.ID, a.RequestHash, a.Request, a.Amount, a.Currency,
							a.Status, a.Fence, ms(a.LeaseExpiresAt), ms(a.CreatedAt), ms(a.UpdatedAt))
					})
					inTx(len(as), func(tx *sql.Tx, i int) {
						a := as[i]
						o := payment.SucceededOutcome(*a, payment.Charge{ID: "ch_" + a.Key})
						record(tx, o.Status, o.ResponseStatus, o.ResponseBody, nullString(o.ChargeID),
							nullString(o.FailureCode), ms(now), a.Scope, a.Key, a.Fence)
					})
				}
				reportRate(b, "payments/s")
			})
		}
	}
}

// reportRate reports b.N per second of the benchmark's wall time.
func reportRate(b *testing.B, unit string) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
}

// BenchmarkStatusIndexCost is what an index of (status, created_at) would
// cost a new payment (for the admin list's status filter to page by
// creation time; it pages by the last change instead, along the index of
// (status, updated_at) that exists): payments on a store with it and on
// one without it, in alternating rounds as in BenchmarkEventCost, with
// each one's rate and CPU per payment and the ratios.
func BenchmarkStatusIndexCost(b *testing.B) {
	dbs := [2]*DB{MustOpen(b, Options{}), MustOpen(b, Options{})} // [without, with]
	if _, err := dbs[1].w.Exec(`CREATE INDEX payment_attempts_status_created ON payment_attempts (status, created_at)`); err != nil {
		b.Fatal(err)
	}
	benchPair(b, [2]string{"without", "with"}, func(i int, a *payment.Attempt) error { return claimRecord(dbs[i], a) })
}
