package metrics

import (
	"context"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/prometheus/client_golang/prometheus"
)

// Deliveries registers the metrics of merchants' events sent to their
// endpoints: the tries' outcomes (Delivered feeds them), endpoints
// disabled, and the backlog of pending deliveries (read from backlog at
// each scrape).
func (m *Metrics) Deliveries(backlog func(context.Context) (payment.DeliveryBacklog, error), now func() time.Time) {
	m.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "oncepay_deliveries_total",
		Help: "Tries of deliveries of merchants' events to their endpoints, by outcome: delivered (answered 2xx), retried (failed, tried again later), failed (failed the last try of the schedule), skipped (another deliverer had it).",
	}, []string{"outcome"})
	for _, o := range []string{"delivered", "retried", "failed", "skipped"} {
		m.deliveries.WithLabelValues(o)
	}
	m.disabled = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "oncepay_endpoints_disabled_total",
		Help: "Endpoints the deliverer disabled because every delivery to them failed for too long: their merchants are told nothing more until they add an endpoint.",
	})
	m.registry.MustRegister(m.deliveries, m.disabled, &backlogCollector{backlog: backlog, now: now})
}

// Delivered counts what one deliverer run did.
func (m *Metrics) Delivered(r payment.DeliverResult) {
	m.deliveries.WithLabelValues("delivered").Add(float64(r.Delivered))
	m.deliveries.WithLabelValues("retried").Add(float64(r.Retried))
	m.deliveries.WithLabelValues("failed").Add(float64(r.GaveUp))
	m.deliveries.WithLabelValues("skipped").Add(float64(r.Skipped))
	m.disabled.Add(float64(r.Disabled))
}

// backlogCollector reads the pending deliveries at each scrape.
type backlogCollector struct {
	backlog func(context.Context) (payment.DeliveryBacklog, error)
	now     func() time.Time
}

var (
	backlogDesc = prometheus.NewDesc("oncepay_deliveries_pending",
		"Deliveries of events not yet answered 2xx and still to be tried.", nil, nil)
	backlogOldestDesc = prometheus.NewDesc("oncepay_deliveries_pending_oldest_age_seconds",
		"Age of the event of the oldest pending delivery; 0 when there is none. Minutes mean an endpoint is failing; days, that it is about to be given up.", nil, nil)
)

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- backlogDesc
	ch <- backlogOldestDesc
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := c.backlog(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(backlogDesc, err)
		return
	}
	age := 0.0
	if !b.Oldest.IsZero() {
		age = c.now().Sub(b.Oldest).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(b.Pending))
	ch <- prometheus.MustNewConstMetric(backlogOldestDesc, prometheus.GaugeValue, age)
}
