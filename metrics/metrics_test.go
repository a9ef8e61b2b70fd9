package metrics_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/metrics"
	"github.com/oncepay/oncepay/payment"
)

// What purge deleted is counted by what it was: attempts and final events.
func TestPurgedCountsEvents(t *testing.T) {
	none := func(context.Context) (int, time.Time, error) { return 0, time.Time{}, nil }
	m := metrics.New(none, time.Now)
	m.Purged(payment.PurgeResult{Deleted: 2, EventsDeleted: 3, OutboxDeleted: 5})
	m.Purged(payment.PurgeResult{Deleted: 1, EventsDeleted: 4})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{"\noncepay_purge_deleted_total 3\n", "\noncepay_purge_events_deleted_total 7\n", "\noncepay_purge_merchant_events_deleted_total 5\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", strings.TrimSpace(want))
		}
	}
}

// The deliveries' counters add up every run; the backlog is read at each
// scrape, its oldest as an age.
func TestDeliveryMetrics(t *testing.T) {
	none := func(context.Context) (int, time.Time, error) { return 0, time.Time{}, nil }
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	m := metrics.New(none, func() time.Time { return now })
	m.Deliveries(func(context.Context) (payment.DeliveryBacklog, error) {
		return payment.DeliveryBacklog{Pending: 4, Oldest: now.Add(-90 * time.Second)}, nil
	}, func() time.Time { return now })
	m.Delivered(payment.DeliverResult{Due: 5, Delivered: 2, Retried: 2, GaveUp: 1, Disabled: 1})
	m.Delivered(payment.DeliverResult{Due: 1, Delivered: 1})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`oncepay_deliveries_total{outcome="delivered"} 3`, `oncepay_deliveries_total{outcome="retried"} 2`,
		`oncepay_deliveries_total{outcome="failed"} 1`, `oncepay_deliveries_total{outcome="skipped"} 0`,
		"\noncepay_endpoints_disabled_total 1\n", "\noncepay_deliveries_pending 4\n", "\noncepay_deliveries_pending_oldest_age_seconds 90\n",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", strings.TrimSpace(want))
		}
	}
}

// The replica's lag, last sync and failures are what its status says at
// the scrape.
func TestReplica(t *testing.T) {
	none := func(context.Context) (int, time.Time, error) { return 0, time.Time{}, nil }
	m := metrics.New(none, time.Now)
	st := metrics.ReplicaStatus{Lag: 1500 * time.Millisecond, LastSync: time.Unix(1_700_000_000, 0), Errors: 3}
	m.Replica(func() metrics.ReplicaStatus { return st })
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{"\noncepay_replica_lag_seconds 1.5\n", "\noncepay_replica_last_sync_timestamp_seconds 1.7e+09\n", "\noncepay_replica_sync_errors_total 3\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", strings.TrimSpace(want))
		}
	}
}
