package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ReplicaStatus is where the replica of the SQLite file stands.
type ReplicaStatus struct {
	Lag      time.Duration // how much a machine lost now would lose, at most
	LastSync time.Time     // when the last successful sync ended; zero before one
	Errors   int64         // syncs that failed since start
}

// Replica registers the replication metrics, read from status at each
// scrape.
func (m *Metrics) Replica(status func() ReplicaStatus) {
	m.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "oncepay_replica_lag_seconds",
			Help: "How far the replica is behind: every write committed longer ago than this is in it. Under a --replica-sync-interval in steady state; alert well before it nears the provider's idempotency window (docs/replication.md).",
		}, func() float64 { return status().Lag.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "oncepay_replica_last_sync_timestamp_seconds",
			Help: "Unix time the last successful sync to the replica ended; 0 before the first.",
		}, func() float64 {
			if t := status().LastSync; !t.IsZero() {
				return float64(t.UnixNano()) / 1e9
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "oncepay_replica_sync_errors_total",
			Help: "Syncs to the replica that failed (the replica then falls behind until one succeeds).",
		}, func() float64 { return float64(status().Errors) }),
	)
}
