package metrics

import (
	"context"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/prometheus/client_golang/prometheus"
)

// Offline registers the forward queue's metrics: the queue per currency
// (read from totals at each scrape), the link's state (from linkUp, nil when
// there is no breaker), and counters that Queued and Forwarded feed.
func (m *Metrics) Offline(totals func(context.Context) ([]payment.QueueTotal, error), linkUp func() bool, now func() time.Time) {
	m.queued = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "oncepay_offline_payments_total",
		Help: "Payments offered to the forward queue while the provider could not be reached, by currency and verdict: queued, over_amount, over_total (the offline declines: answered 503, never charged), offline_off, fenced_out, already_stale.",
	}, []string{"currency", "verdict"})
	m.queuedAmount = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "oncepay_offline_amount_total",
		Help: "Their amounts in minor units, by currency and verdict.",
	}, []string{"currency", "verdict"})
	m.forwards = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "oncepay_forwards_total",
		Help: "Queued payments the forwarder settled or left, by outcome: succeeded, declined (the merchant's offline risk), expired, unknown (left queued).",
	}, []string{"outcome"})
	for _, o := range []string{"succeeded", "declined", "expired", "unknown"} {
		m.forwards.WithLabelValues(o)
	}
	m.registry.MustRegister(m.queued, m.queuedAmount, m.forwards, &queueCollector{totals: totals, now: now})
	if linkUp != nil {
		m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "oncepay_provider_link_up",
			Help: "1 while calls reach the provider, 0 while the circuit breaker is open or probing: new payments are then queued (or 503) without a call.",
		}, func() float64 {
			if linkUp() {
				return 1
			}
			return 0
		}))
	}
}

// Queued counts one payment offered to the forward queue.
func (m *Metrics) Queued(v payment.QueueVerdict, currency string, amount int64) {
	m.queued.WithLabelValues(currency, string(v)).Inc()
	m.queuedAmount.WithLabelValues(currency, string(v)).Add(float64(amount))
}

// Forwarded counts what one forward run did.
func (m *Metrics) Forwarded(r payment.ForwardResult) {
	m.forwards.WithLabelValues("succeeded").Add(float64(r.Succeeded))
	m.forwards.WithLabelValues("declined").Add(float64(r.Declined))
	m.forwards.WithLabelValues("expired").Add(float64(r.Expired))
	m.forwards.WithLabelValues("unknown").Add(float64(r.Unknown))
}

// queueCollector reads the forward queue at each scrape.
type queueCollector struct {
	totals func(context.Context) ([]payment.QueueTotal, error)
	now    func() time.Time
}

var (
	queuedDesc = prometheus.NewDesc("oncepay_queued_payments",
		"Payments in the forward queue, by currency.", []string{"currency"}, nil)
	queuedAmountDesc = prometheus.NewDesc("oncepay_queued_amount",
		"Their amount in minor units, by currency: the merchants' money at risk.", []string{"currency"}, nil)
	queuedOldestDesc = prometheus.NewDesc("oncepay_queued_oldest_age_seconds",
		"Age of the oldest queued payment, by currency. Alert well before the merchants' max age.", []string{"currency"}, nil)
)

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queuedDesc
	ch <- queuedAmountDesc
	ch <- queuedOldestDesc
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ts, err := c.totals(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(queuedDesc, err)
		return
	}
	for _, t := range ts {
		ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(t.Count), t.Currency)
		ch <- prometheus.MustNewConstMetric(queuedAmountDesc, prometheus.GaugeValue, float64(t.Amount), t.Currency)
		ch <- prometheus.MustNewConstMetric(queuedOldestDesc, prometheus.GaugeValue, c.now().Sub(t.Oldest).Seconds(), t.Currency)
	}
}
