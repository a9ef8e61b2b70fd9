package server

import (
	"net/http"
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
	s.render(w, r, "endpoint", p)
}
