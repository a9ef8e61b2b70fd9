// Package metrics is oncepay's Prometheus instrumentation: what the payment
// flow, the jobs and the HTTP layer did, and how many attempts are stuck.
package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/oncepay/oncepay/internal/replaycache"
	"github.com/oncepay/oncepay/payment"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// InProgressFunc reports the attempts in progress and the creation time of
// the oldest (zero when there are none). It is called at each scrape.
type InProgressFunc func(ctx context.Context) (n int, oldest time.Time, err error)

// Metrics holds oncepay's collectors in a registry of its own.
type Metrics struct {
	registry  *prometheus.Registry
	requests  *prometheus.CounterVec
	refunds   *prometheus.CounterVec
	byOutcome map[string]prometheus.Counter // requests' children, resolved once: read-only after New
	provider  *prometheus.HistogramVec
	reconcile *prometheus.CounterVec
	purged    prometheus.Counter
	purgedEvs prometheus.Counter
	webhooks  *prometheus.CounterVec
	refused   *prometheus.CounterVec
	// The forward queue's (offline.go); nil until Offline registers them.
	queued, queuedAmount, forwards *prometheus.CounterVec
	// The deliveries' (deliveries.go); nil until Deliveries registers them.
	deliveries *prometheus.CounterVec
	disabled   prometheus.Counter
	purgedOut  prometheus.Counter
}

// New registers oncepay's metrics and the Go runtime and process collectors.
func New(inProgress InProgressFunc, now func() time.Time) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_payment_requests_total",
			Help: "POST /v1/payments requests by outcome: created, replayed, queued, declined, key_reused, in_progress, outcome_unknown, bad_request, unauthorized, unavailable, internal.",
		}, []string{"outcome"}),
		refunds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_refund_requests_total",
			Help: "POST /v1/payments/{id}/refunds requests by outcome: the payment outcomes, and not_found, not_refundable, refund_exceeds, key_expired.",
		}, []string{"outcome"}),
		provider: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "oncepay_provider_call_duration_seconds",
			Help:    "Provider calls by operation (charge, lookup, refund, refund_lookup) and result (succeeded, declined, unknown, found, not_found).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"op", "result"}),
		reconcile: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_reconcile_attempts_total",
			Help: "Stale attempts reconcile settled, by outcome: succeeded, failed (not completed), unknown (left for the next run).",
		}, []string{"outcome"}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "oncepay_purge_deleted_total",
			Help: "Final attempts deleted by purge after the retention.",
		}),
		purgedEvs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "oncepay_purge_events_deleted_total",
			Help: "Final webhook events (processed, ignored) deleted by purge after the event retention.",
		}),
		purgedOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "oncepay_purge_merchant_events_deleted_total",
			Help: "Events told to merchants (GET /v1/events) deleted by purge after the payment retention.",
		}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_webhook_events_total",
			Help: "Provider event deliveries and tries by provider, event type (empty if unverified) and outcome: processed, ignored, failed, duplicate, busy, error, invalid, too_large.",
		}, []string{"provider", "type", "outcome"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_webhook_events_refused_total",
			Help: "Tries of provider events the inbox refused to apply, by provider (the endpoint) and reason: other_provider (about a payment or refund made through another provider; ignored), unconfirmed (a success or dispute the provider, asked by key or id, does not know; held failed), mismatch (a charge for another amount or currency than the payment's; ignored), conflict (a success contradicting a final answer: a payment failed or succeeded as another charge, a refund failed that the provider says succeeded; money may have moved twice; held failed and logged as an error, for an operator), contradicted (a refund's failure the provider, asked by the refund's key, says succeeded; held failed). Held events are tried again, and each try counts.",
		}, []string{"provider", "reason"}),
	}
	m.byOutcome = map[string]prometheus.Counter{}
	for _, o := range []string{"created", "replayed", "declined"} { // the outcomes of nearly every request
		m.byOutcome[o] = m.requests.WithLabelValues(o)
	}
	for _, o := range []string{"succeeded", "failed", "unknown"} {
		m.reconcile.WithLabelValues(o) // present at zero from the start
	}
	m.registry.MustRegister(m.requests, m.refunds, m.provider, m.reconcile, m.purged, m.purgedEvs, m.purgedOut, m.webhooks, m.refused,
		&inProgressCollector{fn: inProgress, now: now},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Store registers what store reports of itself: its replay cache
// (ReplayCacher: both stores) and its writer (GroupCommitter: SQLite;
// PostgreSQL commits each write itself).
func (m *Metrics) Store(store payment.Database) {
	if c, ok := store.(ReplayCacher); ok {
		m.replayCache(c.ReplayCacheStats)
	}
	if g, ok := store.(GroupCommitter); ok {
		m.groupCommit(g)
	}
}

// ReplayCacher is a store that keeps a replay cache.
type ReplayCacher interface{ ReplayCacheStats() replaycache.Stats }

// replayCache reports what a store's replay cache did, read at each scrape.
func (m *Metrics) replayCache(stats func() replaycache.Stats) {
	m.registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "oncepay_replay_cache_hits_total",
			Help: "Retries of a settled key (and refund) answered from memory, reading no table.",
		}, func() float64 { return float64(stats().Hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "oncepay_replay_cache_fills_total",
			Help: "Final answers read from the table and kept in memory for the next replay; many against few hits means --replay-cache-mb is too small for the retries.",
		}, func() float64 { return float64(stats().Fills) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "oncepay_replay_cache_bytes",
			Help: "Memory the kept answers take, at most --replay-cache-mb.",
		}, func() float64 { return float64(stats().Bytes) }),
	)
}

// GroupCommitter is a store whose writes go through one group-commit writer.
type GroupCommitter interface {
	WriteStats() (commits, writes int64)
	WritesQueued() int64
}

// groupCommit reports what a store's writer did, read at each scrape: its
// transactions, the writes they held (writes over commits is the mean
// batch) and the writes waiting for it.
func (m *Metrics) groupCommit(g GroupCommitter) {
	m.registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "oncepay_store_commits_total",
			Help: "Transactions the database writer committed, each one sync of the disk.",
		}, func() float64 { c, _ := g.WriteStats(); return float64(c) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "oncepay_store_writes_total",
			Help: "Writes (claims, records, ...) those transactions held; its rate over the commits' is the mean batch.",
		}, func() float64 { _, w := g.WriteStats(); return float64(w) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "oncepay_store_writes_queued",
			Help: "Writes waiting for the writer to take them: how far behind it is.",
		}, func() float64 { return float64(g.WritesQueued()) }),
	)
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// Refund counts one refund request by outcome.
func (m *Metrics) Refund(outcome string) { m.refunds.WithLabelValues(outcome).Inc() }

// Request counts one payment request by outcome.
func (m *Metrics) Request(outcome string) {
	if c, ok := m.byOutcome[outcome]; ok {
		c.Inc()
		return
	}
	m.requests.WithLabelValues(outcome).Inc()
}

// ProviderCall observes one provider call.
func (m *Metrics) ProviderCall(op, result string, d time.Duration) {
	m.provider.WithLabelValues(op, result).Observe(d.Seconds())
}

// Reconciled counts what one reconcile run settled.
func (m *Metrics) Reconciled(r payment.ReconcileResult) {
	m.reconcile.WithLabelValues("succeeded").Add(float64(r.Succeeded))
	m.reconcile.WithLabelValues("failed").Add(float64(r.Failed))
	m.reconcile.WithLabelValues("unknown").Add(float64(r.Unknown))
}

// WebhookEvent counts one delivery or try of a provider event.
func (m *Metrics) WebhookEvent(provider, eventType, outcome string) {
	m.webhooks.WithLabelValues(provider, eventType, outcome).Inc()
}

// WebhookRefused counts one try that refused a provider event, and why.
func (m *Metrics) WebhookRefused(provider, reason string) {
	m.refused.WithLabelValues(provider, reason).Inc()
}

// Purged counts what one purge run deleted.
func (m *Metrics) Purged(r payment.PurgeResult) {
	m.purged.Add(float64(r.Deleted))
	m.purgedEvs.Add(float64(r.EventsDeleted))
	m.purgedOut.Add(float64(r.OutboxDeleted))
}

// inProgressCollector asks the store at each scrape, so the gauges are
// never stale and cost nothing between scrapes.
type inProgressCollector struct {
	fn  InProgressFunc
	now func() time.Time
}

var (
	inProgressDesc = prometheus.NewDesc("oncepay_attempts_in_progress",
		"Attempts claimed whose outcome is not yet recorded.", nil, nil)
	oldestDesc = prometheus.NewDesc("oncepay_attempt_in_progress_oldest_age_seconds",
		"Age of the oldest attempt in progress; 0 when there is none. Alert when it passes stale-after plus the reconcile interval.", nil, nil)
)

func (c *inProgressCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inProgressDesc
	ch <- oldestDesc
}

func (c *inProgressCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, oldest, err := c.fn(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(inProgressDesc, err)
		return
	}
	age := 0.0
	if !oldest.IsZero() {
		age = c.now().Sub(oldest).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(inProgressDesc, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age)
}
