package payment_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// slowStore's Purge holds the writer perRow a row, for rows rows in all,
// after waiting wait of its clock for its turn; it records each batch's
// limit.
type slowStore struct {
	now    time.Time
	wait   time.Duration
	perRow func(batch int) time.Duration
	rows   int
	limits []int
}

func (s *slowStore) Purge(_ context.Context, _ time.Time, limit int) (int, time.Duration, error) {
	s.limits = append(s.limits, limit)
	n := min(limit, s.rows)
	s.rows -= n
	held := time.Duration(n) * s.perRow(len(s.limits))
	s.now = s.now.Add(s.wait + held)
	return n, held, nil
}
func (*slowStore) PurgePayments(context.Context, time.Time, int) (int, time.Duration, error) {
	return 0, 0, nil
}
func (*slowStore) PurgeEvents(context.Context, time.Time, int) (int, time.Duration, error) {
	return 0, 0, nil
}
func (*slowStore) PurgeOutbox(context.Context, time.Time, int) (int, time.Duration, error) {
	return 0, 0, nil
}

// Bounded by time, the first batch is 64 rows (the floor) and quick ones
// double the next; a batch that held the writer past BatchTime halves the
// next, never below the floor; once batches are quick again they double
// back up to BatchSize; the next run starts where the last ended; every
// row is purged all the same. Negative BatchTime: every batch whole. The
// wait for the writer (behind the payments' writes) is not the batch's:
// batches that wait long but hold the writer briefly stay whole.
func TestPurgeBatchesBoundedByTime(t *testing.T) {
	for _, tt := range []struct {
		name      string
		batchTime time.Duration
		wait      time.Duration
		want      []int
	}{
		// 100µs a row for the first nine batches (64 rows: 6.4ms, doubled;
		// 128 rows: 12.8ms, between half the bound and the bound: kept), 1ms
		// for the next two (halved, then held at the floor of 64), then 1µs.
		{"bounded", 25 * time.Millisecond, 0, []int{64, 128, 128, 128, 128, 128, 128, 128, 128, 128, 64, 64, 128, 256, 512, 1000, 1000}},
		{"whole", -1, 0, []int{1000, 1000, 1000, 1000}},
		{"waiting", 25 * time.Millisecond, 200 * time.Millisecond, []int{64, 128, 128, 128, 128, 128, 128, 128, 128, 128, 64, 64, 128, 256, 512, 1000, 1000}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &slowStore{now: time.Unix(1e9, 0), wait: tt.wait, rows: 3750, perRow: func(batch int) time.Duration {
				switch {
				case batch <= 9:
					return 100 * time.Microsecond
				case batch <= 11:
					return time.Millisecond
				}
				return time.Microsecond
			}}
			p, err := payment.NewPurger(payment.Purger{Store: s, Retention: time.Hour, BatchSize: 1000, BatchTime: tt.batchTime,
				Now: func() time.Time { return s.now }})
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.RunOnce(context.Background())
			if err != nil || res.Deleted != 3750 {
				t.Fatalf("RunOnce = %+v, %v, want 3,750 deleted", res, err)
			}
			if !slices.Equal(s.limits, tt.want) {
				t.Errorf("batch limits = %v, want %v", s.limits, tt.want)
			}
			// The next run starts where this one ended, not at one row.
			s.rows = 1500
			first := len(s.limits)
			if res, err := p.RunOnce(context.Background()); err != nil || res.Deleted != 1500 {
				t.Fatalf("second RunOnce = %+v, %v, want 1,500 deleted", res, err)
			}
			if got, want := s.limits[first:], []int{1000, 1000}; !slices.Equal(got, want) {
				t.Errorf("second run's batch limits = %v, want %v", got, want)
			}
		})
	}
}
