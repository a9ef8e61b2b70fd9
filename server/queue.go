package server

import (
	"fmt"
	"net/http"

	"github.com/oncepay/oncepay/payment"
)

// queuePage is the forward queue as operators read it: the money at risk
// per currency, the link, and each queued payment's tries.
type queuePage struct {
	pageBase
	Link     string // "up", "down", "probing"; "" without a link
	Totals   []queueTotalRow
	Forwards []forwardRow
	More     bool // the list shows the oldest queuePageSize only
}

type queueTotalRow struct {
	payment.QueueTotal
	AmountText, OldestAge string
}

type forwardRow struct {
	payment.Forward
	AmountText, Age, ExpiresIn, Lease string
}

const queuePageSize = 200

// handleAdminQueue is the forward queue page.
func (s *server) handleAdminQueue(w http.ResponseWriter, r *http.Request) {
	q := s.Admin.Queue
	totals, err := q.QueueTotals(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list, err := q.Forwards(r.Context(), queuePageSize+1)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	now := s.now()
	p := queuePage{pageBase: s.pageBase(now), More: len(list) > queuePageSize}
	if s.Admin.Link != nil {
		p.Link = s.Admin.Link()
	}
	for _, t := range totals {
		p.Totals = append(p.Totals, queueTotalRow{QueueTotal: t, AmountText: formatAmount(t.Amount, t.Currency), OldestAge: age(now.Sub(t.Oldest))})
	}
	for _, f := range list[:min(len(list), queuePageSize)] {
		row := forwardRow{Forward: f, AmountText: formatAmount(f.Amount, f.Currency), Age: age(now.Sub(f.QueuedAt)),
			ExpiresIn: age(f.ExpiresAt.Sub(now)), Lease: "none"}
		if !f.ExpiresAt.After(now) {
			row.ExpiresIn = "past: expires unless found charged"
		}
		if f.LeaseExpiresAt.After(now) {
			row.Lease = "forwarding until " + f.LeaseExpiresAt.Format("15:04:05") + " UTC"
		}
		p.Forwards = append(p.Forwards, row)
	}
	if qs := r.URL.Query(); qs.Has("forwarded") {
		p.Flash = fmt.Sprintf("Forwarded %s due: %s succeeded, %s declined, %s expired, %s left queued.",
			num(qs.Get("forwarded")), num(qs.Get("succeeded")), num(qs.Get("declined")), num(qs.Get("expired")), num(qs.Get("unknown")))
	}
	s.render(w, r, "queue", p)
}

// handleAdminForward runs one forward pass now, as the schedule would.
func (s *server) handleAdminForward(w http.ResponseWriter, r *http.Request) {
	res, err := s.Admin.Forwarder.RunOnce(r.Context())
	s.ranJob(w, r, "forward", res, err, "/admin/queue", []jobCount{{"forwarded", res.Checked}, {"succeeded", res.Succeeded},
		{"declined", res.Declined}, {"expired", res.Expired}, {"unknown", res.Unknown}})
}
