package server

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/oncepay/oncepay/payment"
)

// endpointsPage is where merchants are sent their events, and what is
// still to be sent.
type endpointsPage struct {
	pageBase
	Backlog   payment.DeliveryBacklog
	OldestAge string
	Endpoints []endpointRow
}

// endpointPage is one endpoint and its last deliveries.
type endpointPage struct {
	pageBase
	Endpoint   endpointRow
	Deliveries []deliveryRow
	// Redeliver offers each delivery's "send again": a deliverer is
	// configured and the endpoint is enabled.
	Redeliver bool
}

type endpointRow struct {
	payment.Endpoint
	TypesText, StateText, StateClass string
}

type deliveryRow struct {
	payment.OutboxDelivery
	NextText string
}

// deliveriesPageSize is how many of an endpoint's deliveries its page shows.
const deliveriesPageSize = 100

func endpointView(e payment.Endpoint, now time.Time) endpointRow {
	r := endpointRow{Endpoint: e, TypesText: "all events", StateText: "enabled", StateClass: "enabled"}
	if len(e.Types) > 0 {
		names := make([]string, len(e.Types))
		for i, t := range e.Types {
			names[i] = string(t)
		}
		r.TypesText = strings.Join(names, ", ")
	}
	switch {
	case !e.Enabled():
		r.StateText, r.StateClass = "disabled "+age(now.Sub(e.DisabledAt))+" ago", "disabled"
	case !e.FailingSince.IsZero():
		r.StateText, r.StateClass = "failing for "+age(now.Sub(e.FailingSince)), "failing"
	}
	return r
}

// handleAdminEndpoints lists every merchant's endpoints and the backlog.
func (s *server) handleAdminEndpoints(w http.ResponseWriter, r *http.Request) {
	es, err := s.Admin.Endpoints.Endpoints(r.Context(), "")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	b, err := s.Admin.Endpoints.DeliveryBacklog(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	now := s.now()
	p := endpointsPage{pageBase: s.pageBase(now), Backlog: b, OldestAge: age(now.Sub(b.Oldest))}
	for _, e := range es {
		p.Endpoints = append(p.Endpoints, endpointView(e, now))
	}
	s.render(w, r, "endpoints", p)
}

// handleAdminEndpoint shows one endpoint and its last deliveries.
func (s *server) handleAdminEndpoint(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	es, err := s.Admin.Endpoints.Endpoints(r.Context(), "")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	now := s.now()
	p := endpointPage{pageBase: s.pageBase(now)}
	for _, e := range es {
		if e.ID == id {
			p.Endpoint = endpointView(e, now)
		}
	}
	if p.Endpoint.ID == "" {
		s.writeError(w, r, payment.Errorf(payment.ENOTFOUND, "No endpoint %q.", id))
		return
	}
	ds, err := s.Admin.Endpoints.Deliveries(r.Context(), id, deliveriesPageSize)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	for _, d := range ds {
		row := deliveryRow{OutboxDelivery: d, NextText: "—"}
		if d.State == payment.DeliveryPending {
			row.NextText = "in " + age(d.NextAt.Sub(now))
			if !d.NextAt.After(now) {
				row.NextText = "due now"
			}
		}
		p.Deliveries = append(p.Deliveries, row)
	}
	p.Redeliver = s.Admin.Deliverer != nil && p.Endpoint.Enabled()
	p.Flash = redeliveredFlash(r.URL.Query())
	s.render(w, r, "endpoint", p)
}

// redeliveredFlash says how a "send again" ended, from the query its
// redirect set: fixed sentences, and the event id only if it is one.
func redeliveredFlash(q url.Values) string {
	id := q.Get("redelivered")
	if !eventID.MatchString(id) {
		return ""
	}
	switch q.Get("outcome") {
	case "delivered":
		return "Sent " + id + " again: delivered."
	case "retried":
		return "Sent " + id + " again: it failed (its last answer is below), and is tried again on the schedule."
	case "failed":
		return "Sent " + id + " again: it failed, and has no try left."
	case "skipped":
		return id + ": a scheduled run took it first, and is sending it."
	}
	return ""
}

var eventID = regexp.MustCompile(`^evt_[0-9A-Za-z]{1,64}$`)

// handleAdminRedeliverDelivery sends one delivery again now (failed for
// good, delivered, or waiting for its next try), through the deliverer's
// own claim, send and fenced finish, then shows the endpoint's page with
// how it ended.
func (s *server) handleAdminRedeliverDelivery(w http.ResponseWriter, r *http.Request) {
	v := mux.Vars(r)
	// The try may take the whole delivery timeout; the answer must not be
	// cut off by the server's write timeout, sized for a payment.
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.Admin.Deliverer.Timeout + 15*time.Second))
	res, err := s.Admin.Deliverer.Redeliver(r.Context(), v["event"], v["id"])
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	outcome := "skipped"
	switch {
	case res.Delivered == 1:
		outcome = "delivered"
	case res.Retried == 1:
		outcome = "retried"
	case res.GaveUp == 1:
		outcome = "failed"
	}
	s.Log.Info("admin: send again", "event_id", v["event"], "endpoint_id", v["id"], "outcome", outcome)
	q := url.Values{"redelivered": {v["event"]}, "outcome": {outcome}}
	http.Redirect(w, r, "/admin/endpoints/"+url.PathEscape(v["id"])+"?"+q.Encode(), http.StatusSeeOther)
}
