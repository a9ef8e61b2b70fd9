package payment_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// slowStore's Purge takes perRow of its clock a row, for rows rows in
// all; it records each batch's limit.
type slowStore struct {
	now    time.Time
	perRow func(batch int) time.Duration
	rows   int
	limits []int
}

func (s *slowStore) Purge(_ context.Context, _ time.Time, limit int) (int, error) {
	s.limits = append(s.limits, limit)
	n := min(limit, s.rows)
	s.rows -= n
	s.now = s.now.Add(time.Duration(n) * s.perRow(len(s.limits)))
	return n, nil
}
func (*slowStore) PurgePayments(context.Context, time.Time, int) (int, error) { return 0, nil }
func (*slowStore) PurgeEvents(context.Context, time.Time, int) (int, error)   { return 0, nil }
func (*slowStore) PurgeOutbox(context.Context, time.Time, int) (int, error)   { return 0, nil }

// A batch that held the writer past BatchTime halves the next; once
// batches are quick again they double back up to BatchSize; every row is
// purged all the same. Negative BatchTime: every batch whole.
func TestPurgeBatchesBoundedByTime(t *testing.T) {
	for _, tt := range []struct {
		name      string
		batchTime time.Duration
		want      []int
	}{
		// 100µs a row for the first four batches (1,000 rows: 100ms), then 1µs.
		{"bounded", 25 * time.Millisecond, []int{1000, 500, 250, 250, 250, 500, 1000, 1000}},
		{"whole", -1, []int{1000, 1000, 1000, 1000}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &slowStore{now: time.Unix(1e9, 0), rows: 3750, perRow: func(batch int) time.Duration {
				if batch <= 4 {
					return 100 * time.Microsecond
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
		})
	}
}
