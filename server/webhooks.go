package server

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gorilla/mux"
	"github.com/oncepay/oncepay/payment"
)

// WebhookVerifier checks a provider's signature over the raw body, with
// the request's headers, and only then reads the event. Any error means the
// delivery is not the provider's: nothing is stored.
type WebhookVerifier func(header http.Header, body []byte) (payment.Event, error)

// MaxWebhookBytes bounds a webhook body: a Stripe event with its
// PaymentIntent is a few KiB.
const MaxWebhookBytes = 256 << 10

// webhookAnswer is the 200 body: the event's state in the inbox.
type webhookAnswer struct {
	EventID   string             `json:"event_id"`
	State     payment.EventState `json:"state"`
	Duplicate bool               `json:"duplicate"`
}

// handleWebhook is POST /v1/webhooks/{provider}. A final event (processed
// or ignored) is 200, so the sender stops. A copy that finds another copy
// at work, or an event whose try failed, is 503 with Retry-After: success
// is never answered before the outcome is durable, and a 5xx is what every
// sender (Stripe, Standard Webhooks) redelivers.
func (s *server) handleWebhook(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["provider"]
	verify, ok := s.Webhooks[name]
	if !ok || s.Inbox == nil {
		writeProblem(w, payment.Problem{Type: payment.ProblemNotFound, Title: "Not found", Status: http.StatusNotFound,
			Detail: "No webhook endpoint is configured for this provider."})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxWebhookBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		s.countWebhook(name, "", "too_large")
		writeProblem(w, payment.Problem{Type: payment.ProblemTooLarge, Title: "Request too large",
			Status: http.StatusRequestEntityTooLarge, Detail: "A webhook body is limited to 256 KiB."})
		return
	}
	if err != nil {
		s.writeError(w, r, payment.Errorf(payment.EINVALID, "The body could not be read."))
		return
	}
	ev, err := verify(r.Header, body)
	if err != nil {
		s.Log.Warn("webhook refused", "provider", name, "err", err)
		s.countWebhook(name, "", "invalid")
		title, detail := "Webhook not verified", "The signature, its timestamp or the event did not verify with this endpoint's secret; nothing was stored."
		if payment.ErrorCode(err) == payment.EINVALID { // verified, and the verifier says what is wrong
			title, detail = "Webhook not supported", payment.ErrorMessage(err)+" Nothing was stored."
		}
		writeProblem(w, payment.Problem{Type: payment.ProblemInvalidWebhook, Title: title, Status: http.StatusBadRequest, Detail: detail})
		return
	}
	ev.Provider = name // the endpoint names the provider, never the body
	d, err := s.Inbox.Deliver(r.Context(), ev)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	infoOf(r).outcome = string(d.State)
	switch {
	case d.Done():
		writeJSON(w, http.StatusOK, webhookAnswer{EventID: ev.ID, State: d.State, Duplicate: d.Duplicate})
		return
	case d.Busy:
		infoOf(r).outcome = "busy"
		w.Header().Set("Retry-After", strconv.Itoa(payment.RetryAfterSeconds))
		writeProblem(w, payment.Problem{Type: payment.ProblemEventInProgress, Title: "Event in progress", Status: http.StatusServiceUnavailable,
			Detail: "Another delivery of this event is being applied; redeliver to learn its outcome."})
	default:
		w.Header().Set("Retry-After", strconv.Itoa(payment.RetryAfterSeconds))
		writeProblem(w, payment.Problem{Type: payment.ProblemEventNotApplied, Title: "Event not applied", Status: http.StatusServiceUnavailable,
			Detail: "The event is stored but could not be applied yet; redeliver it."})
	}
}

func (s *server) countWebhook(provider, eventType, outcome string) {
	if s.CountWebhook != nil {
		s.CountWebhook(provider, eventType, outcome)
	}
}

// eventsPage is the inbox as the admin page shows it.
type eventsPage struct {
	pageBase
	Events []payment.InboxEvent
	State  string
	States []payment.EventState
}

func (s *server) handleAdminEvents(w http.ResponseWriter, r *http.Request) {
	if s.Inbox == nil {
		s.writeError(w, r, payment.Errorf(payment.ENOTFOUND, "No webhooks are configured."))
		return
	}
	f := payment.EventFilter{State: payment.EventState(r.URL.Query().Get("state")), Limit: adminPageSize * 2}
	states := []payment.EventState{payment.EventReceived, payment.EventProcessing, payment.EventProcessed, payment.EventFailedState, payment.EventIgnored}
	if f.State != "" && !contains(states, f.State) {
		s.writeError(w, r, payment.Errorf(payment.EINVALID, "state must be received, processing, processed, failed or ignored."))
		return
	}
	events, err := s.Inbox.Store.ListEvents(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p := eventsPage{pageBase: s.pageBase(s.now()), Events: events, State: string(f.State), States: states}
	if st := r.URL.Query().Get("redelivered"); st != "" {
		p.Flash = "Redelivered: the event is now " + string(payment.EventState(st)) + "."
		if !contains(states, payment.EventState(st)) {
			p.Flash = ""
		}
	}
	s.render(w, r, "events", p)
}

// handleAdminRedeliver processes a failed event again, past the automatic
// tries: the operator's answer to an event left failed.
func (s *server) handleAdminRedeliver(w http.ResponseWriter, r *http.Request) {
	if s.Inbox == nil {
		s.writeError(w, r, payment.Errorf(payment.ENOTFOUND, "No webhooks are configured."))
		return
	}
	v := mux.Vars(r)
	d, err := s.Inbox.Redeliver(r.Context(), v["provider"], v["id"])
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	http.Redirect(w, r, "/admin/events?redelivered="+url.QueryEscape(string(d.State)), http.StatusSeeOther)
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
