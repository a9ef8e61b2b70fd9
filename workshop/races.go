package workshop

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// The three races after the first: the mirror (a provider's events, again
// and out of order), refunds racing, and the dead link. Each has a naive
// lane, deliberately wrong and kept here, and oncepay's lane, which is the
// API's own code: the inbox, the refund flow, the offline queue and its
// forwarder.

// naiveBooks is the naive lanes' memory: a receiver's orders, a server's
// refund totals, a till's queue. Kept in memory and bounded: it is a prop.
type naiveBooks struct {
	mu       sync.Mutex
	orders   map[string]*naiveOrder
	seen     map[string]bool  // the "unique index" on event ids
	refunded map[string]int64 // by charge id
	queue    []naiveSale
}

type naiveOrder struct {
	State     string `json:"state"`     // "", succeeded, failed: the last event wins
	Fulfilled int    `json:"fulfilled"` // times the goods were sent
	Applied   int    `json:"applied"`   // copies of "succeeded" applied
}

type naiveSale struct {
	Key string
	Req payment.Request
}

// naiveLimit bounds each of the books: past it they start again.
const naiveLimit = 10000

func newNaiveBooks() *naiveBooks {
	return &naiveBooks{orders: map[string]*naiveOrder{}, seen: map[string]bool{}, refunded: map[string]int64{}}
}

// naiveWork is how long the naive lanes take between their read and their
// write: the window every race in this file falls through.
const naiveWork = 40 * time.Millisecond

// eventIn is one delivery of a provider event, to either receiver.
type eventIn struct {
	Key     string `json:"key"`      // the checkout's Idempotency-Key (oncepay) or order (naive)
	Kind    string `json:"kind"`     // succeeded, failed
	EventID string `json:"event_id"` // the provider's id of the event
	Mistake string `json:"mistake"`  // naive: "none" or "index"
}

func readEvent(w http.ResponseWriter, r *http.Request) (eventIn, bool) {
	var in eventIn
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&in)
	if err != nil || !payment.ValidKey(in.Key) || !payment.ValidKey(in.EventID) ||
		(in.Kind != string(payment.EventSucceeded) && in.Kind != string(payment.EventFailed)) {
		writeProblem(w, payment.Problem{Type: payment.ProblemInvalidRequest, Title: "Invalid request", Status: 400,
			Detail: `Send {"key": "<the checkout's key>", "kind": "succeeded" or "failed", "event_id": "<the event's id>"}.`})
		return in, false
	}
	return in, true
}

// handleNaiveEvent is the naive receiver: with mistake "none" it applies
// every copy (each "succeeded" sends the goods again); with "index" a unique
// index on the event id drops the copies, but the last event to arrive still
// sets the order's state, whatever the order of the facts.
func (h *Handler) handleNaiveEvent(w http.ResponseWriter, r *http.Request) {
	in, ok := readEvent(w, r)
	if !ok {
		return
	}
	b := h.naive
	b.mu.Lock()
	if in.Mistake == "index" {
		if b.seen[in.EventID] {
			b.mu.Unlock()
			writeJSON(w, http.StatusOK, map[string]any{"duplicate": true})
			return
		}
		if len(b.seen) > naiveLimit {
			clear(b.seen)
		}
		b.seen[in.EventID] = true
	}
	b.mu.Unlock()
	time.Sleep(naiveWork) // fulfilling: packing, emailing
	b.mu.Lock()
	defer b.mu.Unlock()
	o := b.order(in.Key)
	o.State = in.Kind // no state machine: the last write wins
	if in.Kind == string(payment.EventSucceeded) {
		o.Applied++
		o.Fulfilled++
	}
	writeJSON(w, http.StatusOK, map[string]any{"duplicate": false, "order": o})
}

// order returns the naive order for key; b.mu must be held.
func (b *naiveBooks) order(key string) *naiveOrder {
	o := b.orders[key]
	if o == nil {
		if len(b.orders) > naiveLimit {
			clear(b.orders)
		}
		o = &naiveOrder{}
		b.orders[key] = o
	}
	return o
}

// handleMirrorEvent hands one delivery of a provider event about the
// checkout's payment to oncepay's inbox, as the webhook endpoint does after
// checking the signature: the inbox claims it by (provider, event id) and
// moves it through its states.
func (h *Handler) handleMirrorEvent(w http.ResponseWriter, r *http.Request) {
	in, ok := readEvent(w, r)
	if !ok {
		return
	}
	if h.Inbox == nil {
		writeProblem(w, payment.Problem{Type: payment.ProblemUnavailable, Title: "No inbox", Status: 503})
		return
	}
	ctx := r.Context()
	a, err := h.Service.Store.Attempt(ctx, h.Scope, in.Key)
	if err != nil && payment.ErrorCode(err) != payment.ENOTFOUND {
		writeProblem(w, payment.Problem{Type: payment.ProblemUnavailable, Title: "Database unavailable", Status: 503})
		return
	}
	if err != nil || a.Kind != payment.KindPayment {
		writeProblem(w, payment.Problem{Type: payment.ProblemNotFound, Title: "No such payment", Status: 404, Detail: "Pay with this key first."})
		return
	}
	ev := payment.Event{Provider: h.Inbox.Endpoint, ID: in.EventID, Kind: payment.EventKind(in.Kind),
		PaymentID: a.ID, DownstreamKey: payment.DownstreamKey(h.Scope, in.Key)}
	if ev.Kind == payment.EventSucceeded {
		ev.Type = "charge.succeeded"
		c, found, err := h.Service.Provider.Lookup(ctx, payment.LookupRequest{IdempotencyKey: ev.DownstreamKey, CreatedAt: a.CreatedAt})
		if err != nil || !found {
			writeProblem(w, payment.Problem{Type: payment.ProblemUnavailable, Title: "No charge to tell of", Status: 503, Detail: "The provider has no charge under this key."})
			return
		}
		ev.Charge = c
	} else {
		ev.Type, ev.DeclineCode, ev.DeclineReason = "charge.failed", "card_declined", "The card was declined."
	}
	d, err := h.Inbox.Deliver(ctx, ev)
	if err != nil {
		writeProblem(w, payment.Problem{Type: payment.ProblemEventNotApplied, Title: "Event not applied", Status: 503, Detail: payment.ErrorMessage(err)})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"state": d.State, "duplicate": d.Duplicate, "busy": d.Busy, "done": d.Done()})
}

// handleMirrorState is GET /demo/mirror/state?key=K&event=ID...: the
// payment's status, the inbox's state of each event, how many times the shop
// was told the payment succeeded (its payment.succeeded events, which the
// shop fulfils on), and the naive receiver's order for K.
func (h *Handler) handleMirrorState(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	key := q.Get("key")
	out := map[string]any{"status": "", "fulfilled": 0, "events": map[string]any{}}
	h.naive.mu.Lock()
	o := naiveOrder{}
	if n := h.naive.orders[key]; n != nil {
		o = *n
	}
	h.naive.mu.Unlock()
	out["naive"] = o
	if !payment.ValidKey(key) {
		writeProblem(w, payment.Problem{Type: payment.ProblemInvalidKey, Title: "Invalid key", Status: 400, Detail: "Give ?key=, the payment's Idempotency-Key."})
		return
	}
	if a, err := h.Service.Store.Attempt(ctx, h.Scope, key); err == nil {
		out["status"] = a.Status
		es, err := h.Service.Store.OutboxEvents(ctx, payment.OutboxFilter{Scope: h.Scope, Type: payment.EventPaymentSucceeded, Limit: 100})
		if err == nil {
			n := 0
			for _, e := range es {
				if e.ObjectID == a.ID {
					n++
				}
			}
			out["fulfilled"] = n
		}
	}
	events := map[string]any{}
	if h.Inbox != nil {
		for _, id := range q["event"] {
			if e, err := h.Inbox.Store.InboxEvent(ctx, h.Inbox.Endpoint, id); err == nil {
				events[id] = map[string]any{"state": e.State, "attempts": e.Attempts, "result": e.Result}
			}
		}
	}
	out["events"] = events
	writeJSON(w, http.StatusOK, out)
}

// handleNaiveRefund is the naive lane's refund: it reads what its books say
// was refunded, asks the provider to refund, then writes the books. Two
// refunds at once both read "nothing refunded yet".
func (h *Handler) handleNaiveRefund(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Key    string `json:"key"` // the naive payment's key
		Amount int64  `json:"amount"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&in); err != nil || !payment.ValidKey(in.Key) || in.Amount <= 0 {
		writeProblem(w, payment.Problem{Type: payment.ProblemInvalidRequest, Title: "Invalid request", Status: 400, Detail: `Send {"key": "<the naive payment's key>", "amount": <minor units>}.`})
		return
	}
	ctx := r.Context()
	a, err := h.Service.Store.Attempt(ctx, naiveScope, in.Key)
	if err != nil && payment.ErrorCode(err) != payment.ENOTFOUND {
		writeProblem(w, payment.Problem{Type: payment.ProblemUnavailable, Title: "Database unavailable", Status: 503})
		return
	}
	if err != nil || a.Status != payment.Succeeded || a.ChargeID == "" {
		writeProblem(w, payment.Problem{Type: payment.ProblemNotRefundable, Title: "Payment not refundable", Status: 409})
		return
	}
	h.naive.mu.Lock()
	refunded := h.naive.refunded[a.ChargeID] // Mistake: a read decides
	h.naive.mu.Unlock()
	if refunded+in.Amount > a.Amount {
		writeProblem(w, payment.Problem{Type: payment.ProblemRefundExceeds, Title: "Refund exceeds what is left", Status: 409})
		return
	}
	pr, err := h.Service.Provider.Refund(ctx, payment.ProviderRefundRequest{IdempotencyKey: "naive_refund_" + rand.Text()[:12],
		ChargeID: a.ChargeID, Amount: in.Amount, Currency: a.Currency})
	if err != nil {
		writeProblem(w, payment.Problem{Type: "/problems/naive-provider-error", Title: "Provider error", Status: 502, Detail: payment.ErrorMessage(err)})
		return
	}
	h.naive.mu.Lock()
	if len(h.naive.refunded) > naiveLimit {
		clear(h.naive.refunded)
	}
	h.naive.refunded[a.ChargeID] += in.Amount // then the write
	h.naive.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{"id": pr.ID, "amount": pr.Amount, "status": "succeeded"})
}

// handleRefunds is GET /demo/refunds?charge=ID...: the provider's refunds of
// each charge, what the bank paid out.
func (h *Handler) handleRefunds(w http.ResponseWriter, r *http.Request) {
	refunds, err := h.Ledger.Refunds(r.Context())
	if err != nil {
		writeProblem(w, payment.Problem{Type: payment.ProblemUnavailable, Title: "Ledger unavailable", Status: 503})
		return
	}
	out := map[string][]payment.ProviderRefund{}
	for _, id := range r.URL.Query()["charge"] {
		out[id] = []payment.ProviderRefund{}
	}
	for _, rf := range refunds {
		if list, ok := out[rf.ChargeID]; ok {
			out[rf.ChargeID] = append(list, rf)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// OfflineLimits are the dead link case's merchant's: at most 25.00 a
// payment and 50.00 queued, for an hour.
var OfflineLimits = payment.OfflineLimits{MaxAmount: 2500, MaxTotal: 5000, MaxAge: time.Hour}

// handleOfflinePay is a payment of the dead link case's merchant, through
// the API's own flow: within its offline limits a dead link gives 202 queued.
func (h *Handler) handleOfflinePay(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if !payment.ValidKey(key) {
		writeProblem(w, payment.Problem{Type: payment.ProblemInvalidKey, Title: "Invalid Idempotency-Key", Status: 400})
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		writeProblem(w, payment.ProblemOf(err))
		return
	}
	req, err := payment.ParseRequest(body)
	if err != nil {
		writeProblem(w, payment.ProblemOf(err))
		return
	}
	if err := h.offlineLimits(r.Context()); err != nil {
		writeProblem(w, payment.Problem{Type: payment.ProblemUnavailable, Title: "Offline limits not set", Status: 503, Detail: payment.ErrorMessage(err)})
		return
	}
	h.pay(w, r, offlineScope, key, req)
}

// offlineLimits gives the dead link case's merchant its limits, once.
func (h *Handler) offlineLimits(ctx context.Context) error {
	h.offlineMu.Lock()
	defer h.offlineMu.Unlock()
	if h.offlineSet {
		return nil
	}
	lim := OfflineLimits
	if err := h.Service.Store.SetOfflineLimits(ctx, offlineScope, &lim); err != nil {
		return err
	}
	h.offlineSet = true
	return nil
}

// handleOfflineForward runs the forwarder once, as cron or the link's
// return would.
func (h *Handler) handleOfflineForward(w http.ResponseWriter, r *http.Request) {
	if h.Forwarder == nil {
		writeProblem(w, payment.Problem{Type: payment.ProblemUnavailable, Title: "No forwarder", Status: 503})
		return
	}
	res, err := h.Forwarder.RunOnce(r.Context())
	if err != nil {
		writeProblem(w, payment.Problem{Type: payment.ProblemUnavailable, Title: "Forward failed", Status: 503, Detail: payment.ErrorMessage(err)})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"checked": res.Checked, "succeeded": res.Succeeded, "declined": res.Declined,
		"expired": res.Expired, "unknown": res.Unknown, "skipped": res.Skipped})
}

// handleOfflineStatus is GET /demo/offline/payments?key=K...: the status of
// each of the case's payments, as GET /v1/payments/{id} shows it.
func (h *Handler) handleOfflineStatus(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	out := map[string]string{}
	for _, k := range r.URL.Query()["key"] {
		a, err := h.Service.Store.Attempt(ctx, offlineScope, k)
		if err != nil {
			continue
		}
		status := string(a.Status)
		if v, err := h.Service.Payment(ctx, offlineScope, a.ID); err == nil {
			status = string(v.Status)
		}
		out[k] = status
	}
	writeJSON(w, http.StatusOK, out)
}

// handleNaiveOfflinePay is the naive till: the link is down, so it keeps
// every sale, with no limit, to send later.
func (h *Handler) handleNaiveOfflinePay(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	body, err := readBody(w, r)
	if err != nil || !payment.ValidKey(key) {
		writeProblem(w, payment.Problem{Type: payment.ProblemInvalidRequest, Title: "Invalid request", Status: 400})
		return
	}
	req, err := payment.ParseRequest(body)
	if err != nil {
		writeProblem(w, payment.ProblemOf(err))
		return
	}
	h.naive.mu.Lock()
	if len(h.naive.queue) < naiveLimit {
		h.naive.queue = append(h.naive.queue, naiveSale{Key: key, Req: req})
	}
	h.naive.mu.Unlock()
	writeJSON(w, http.StatusAccepted, map[string]any{"status": "queued"})
}

// handleNaiveOfflineForward sends the naive till's queue: each sale with a
// new provider key on every try, and a sale stays queued until an answer
// comes back, so a lost answer charges it again next time.
func (h *Handler) handleNaiveOfflineForward(w http.ResponseWriter, r *http.Request) {
	h.naive.mu.Lock()
	queue := h.naive.queue
	h.naive.queue = nil
	h.naive.mu.Unlock()
	var kept []naiveSale
	sent := 0
	for _, s := range queue {
		_, err := h.Service.Provider.Charge(r.Context(), payment.ChargeRequest{
			IdempotencyKey: NaiveKeyPrefix(s.Key) + rand.Text()[:8],
			Amount:         s.Req.Amount, Currency: s.Req.Currency, Source: s.Req.Source, Description: s.Req.Description,
		})
		if _, declined := payment.IsDecline(err); err != nil && !declined {
			kept = append(kept, s)
			continue
		}
		sent++
	}
	h.naive.mu.Lock()
	h.naive.queue = append(kept, h.naive.queue...)
	h.naive.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"sent": sent, "kept": len(kept)})
}
