// Package workshop is demo mode's teaching aid: the demo page and its
// printable handout, in English and Uzbek; deliberately wrong paths to
// compare oncepay with (a payment, a webhook receiver, a refund, a till on
// a dead link), each beside the API's own code; and a simulated crash.
// Only "oncepay demo" wires it; serve has no route to any of it.
package workshop

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"html/template"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oncepay/oncepay/internal/fallback"
	"github.com/oncepay/oncepay/internal/httpjson"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/web"
)

// Ledger is the simulated provider's record of what was charged and refunded.
type Ledger interface {
	Charges(ctx context.Context) ([]payment.Charge, error)
	Refunds(ctx context.Context) ([]payment.ProviderRefund, error)
}

// Config is what the workshop runs on: the same service, inbox and
// forwarder the API uses, so each case shows the real code paths.
type Config struct {
	Service    *payment.Service
	Reconciler *payment.Reconciler
	// Inbox is the provider events' inbox the webhook endpoint delivers to.
	Inbox *payment.Inbox
	// Forwarder sends the payments queued offline.
	Forwarder *payment.Forwarder
	Ledger    Ledger
	// Scope is where the real lane's payments live (demo mode's scope).
	Scope string
}

// Handler serves /demo and its API.
type Handler struct {
	Config
	pages map[string]*template.Template
	naive *naiveBooks
	// offlineOnce sets the dead link case's offline limits on first use.
	offlineMu  sync.Mutex
	offlineSet bool
	mux        *http.ServeMux
	serve      http.Handler // mux, with its 404 and 405 as problems
}

// naiveScope keeps the naive lane's rows apart from the real ones;
// offlineScope is the dead link case's merchant, the only one with offline
// limits, so the other cases' faults never queue a payment.
const (
	naiveScope   = "demo-naive"
	offlineScope = "demo-offline"
)

// New returns the workshop handler.
func New(c Config) *Handler {
	h := &Handler{Config: c, pages: parsePages(), naive: newNaiveBooks(), mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /demo", h.handlePage)
	h.mux.HandleFunc("GET /demo/handout", h.handleHandout)
	h.mux.Handle("GET /demo/static/", http.StripPrefix("/demo", fallback.Static(web.Assets, http.HandlerFunc(handleNotFound))))
	h.mux.HandleFunc("POST /demo/naive/payments", h.handleNaivePay)
	h.mux.HandleFunc("GET /demo/charges", h.handleCharges)
	h.mux.HandleFunc("POST /demo/crash", h.handleCrash)
	h.mux.HandleFunc("POST /demo/reconcile", h.handleReconcile)
	// The mirror: the same provider events to a naive receiver and the inbox.
	h.mux.HandleFunc("POST /demo/mirror/events", h.handleMirrorEvent)
	h.mux.HandleFunc("GET /demo/mirror/state", h.handleMirrorState)
	h.mux.HandleFunc("POST /demo/naive/events", h.handleNaiveEvent)
	// Refunds racing: the naive lane's refunds; oncepay's are the API's.
	h.mux.HandleFunc("POST /demo/naive/refunds", h.handleNaiveRefund)
	h.mux.HandleFunc("GET /demo/refunds", h.handleRefunds)
	// The dead link: a till that queues, on both lanes.
	h.mux.HandleFunc("POST /demo/offline/payments", h.handleOfflinePay)
	h.mux.HandleFunc("POST /demo/offline/forward", h.handleOfflineForward)
	h.mux.HandleFunc("GET /demo/offline/payments", h.handleOfflineStatus)
	h.mux.HandleFunc("POST /demo/naive/offline/payments", h.handleNaiveOfflinePay)
	h.mux.HandleFunc("POST /demo/naive/offline/forward", h.handleNaiveOfflineForward)
	h.serve = fallback.Mux(h.mux, http.HandlerFunc(handleNotFound), http.HandlerFunc(handleMethodNotAllowed))
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The page loads nothing from elsewhere and runs only its own script.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h.serve.ServeHTTP(w, r)
}

func handleNotFound(w http.ResponseWriter, _ *http.Request) {
	writeProblem(w, payment.Problem{Type: payment.ProblemNotFound, Title: "Not found", Status: http.StatusNotFound, Detail: "No such route."})
}

func handleMethodNotAllowed(w http.ResponseWriter, _ *http.Request) {
	writeProblem(w, payment.Problem{Type: payment.ProblemMethodNotAllowed, Title: "Method not allowed", Status: http.StatusMethodNotAllowed})
}

// handleNaivePay is the naive lane. With ?mistake=newkey the server is
// oncepay's own (in a scope of its own): the mistake is the client's, which
// sends a new key with every retry. Otherwise it is the WRONG server, kept
// to be compared with the right one: it checks whether the key was seen,
// then charges, then writes the row.
// Between the check and the write, every concurrent retry also sees
// nothing and charges again (the race); and a lost provider answer leaves no
// row, so the client's retry charges again (the lost response). It also
// gives the provider a new idempotency key on every call, so the provider
// cannot dedupe either.
func (h *Handler) handleNaivePay(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if !payment.ValidKey(key) {
		writeProblem(w, payment.Problem{Type: payment.ProblemInvalidKey, Title: "Invalid Idempotency-Key", Status: 400})
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		writeProblem(w, payment.Problem{Type: payment.ProblemInvalidRequest, Title: "Invalid request", Status: 400, Detail: payment.ErrorMessage(err)})
		return
	}
	req, err := payment.ParseRequest(body)
	if err != nil {
		writeProblem(w, payment.ProblemOf(err)) // EINVALID: 400 invalid-request, with its param
		return
	}
	ctx := r.Context()
	if r.URL.Query().Get("mistake") == "newkey" {
		h.pay(w, r, naiveScope, key, req)
		return
	}
	// Mistake: a read decides. Nothing stops a second request from reading
	// "not found" before the first writes.
	if a, err := h.Service.Store.Attempt(ctx, naiveScope, key); err == nil && a.Status != payment.InProgress {
		w.Header().Set("Idempotent-Replayed", "true")
		writeRaw(w, a.ResponseStatus, a.ResponseBody)
		return
	}
	// Mistake: a fresh downstream key per call, so the provider charges each one.
	c, err := h.Service.Provider.Charge(ctx, payment.ChargeRequest{
		IdempotencyKey: NaiveKeyPrefix(key) + rand.Text()[:8],
		Amount:         req.Amount, Currency: req.Currency, Source: req.Source, Description: req.Description,
	})
	if d, declined := payment.IsDecline(err); declined {
		writeProblem(w, payment.Problem{Type: payment.ProblemDeclined, Title: "Payment declined", Status: 402, Detail: d.Message, DeclineCode: d.Code})
		return
	}
	if err != nil {
		writeProblem(w, payment.Problem{Type: "/problems/naive-provider-error", Title: "Provider error", Status: 502,
			Detail: "The provider's answer was lost. The naive path stored nothing, so a retry will charge again."})
		return
	}
	now := h.Service.Now()
	a := payment.NewAttempt(naiveScope, key, req, now, 0)
	a.Provider = h.Service.ProviderName
	o := payment.SucceededOutcome(a, c)
	o.Event = payment.ChangeEvent(a, o, now)
	// Then the write, whose result is ignored: a racing request may have won.
	if _, err := h.Service.Store.Claim(ctx, &a); err == nil {
		h.Service.Store.Record(ctx, a.Kind, naiveScope, key, 1, o, now)
	}
	writeRaw(w, o.ResponseStatus, o.ResponseBody)
}

// pay answers as POST /v1/payments does.
func (h *Handler) pay(w http.ResponseWriter, r *http.Request, scope, key string, req payment.Request) {
	res, err := h.Service.Pay(r.Context(), scope, key, req)
	if err != nil {
		if payment.ErrorCode(err) == payment.EINTERNAL {
			h.Service.Log.Error("workshop: internal error", "err", err)
		}
		p := payment.ProblemOf(err)
		if p.Retryable() {
			w.Header().Set("Retry-After", strconv.Itoa(payment.RetryAfterSeconds))
		}
		writeProblem(w, p)
		return
	}
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeRaw(w, res.Status, res.Body)
}

// NaiveKeyPrefix starts every downstream key the naive path makes for key,
// so the ledger's charges can be traced back to the checkout.
func NaiveKeyPrefix(key string) string { return "naive_" + key + "_" }

// handleCharges is GET /demo/charges?oncepay=K&naive=K&offline=K...: the
// ledger's charges for the real lane's keys, the naive lane's keys and the
// dead link case's keys.
func (h *Handler) handleCharges(w http.ResponseWriter, r *http.Request) {
	charges, err := h.Ledger.Charges(r.Context())
	if err != nil {
		writeProblem(w, payment.Problem{Type: payment.ProblemUnavailable, Title: "Ledger unavailable", Status: 503})
		return
	}
	q := r.URL.Query()
	out := map[string][]payment.Charge{"oncepay": {}, "naive": {}}
	out["offline"] = []payment.Charge{}
	for _, c := range charges {
		for _, k := range q["offline"] {
			if c.IdempotencyKey == payment.DownstreamKey(offlineScope, k) {
				out["offline"] = append(out["offline"], c)
			}
		}
		for _, k := range q["oncepay"] {
			if c.IdempotencyKey == payment.DownstreamKey(h.Scope, k) {
				out["oncepay"] = append(out["oncepay"], c)
			}
		}
		for _, k := range q["naive"] {
			if c.IdempotencyKey == payment.DownstreamKey(naiveScope, k) || strings.HasPrefix(c.IdempotencyKey, NaiveKeyPrefix(k)) {
				out["naive"] = append(out["naive"], c)
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// handleCrash plays an owner that claimed key, got the provider to charge,
// and died before recording: the row stays in progress with its lease run
// out. The claim is dated past stale-after, standing in for the minutes a
// real abandoned claim waits before reconcile looks at it.
func (h *Handler) handleCrash(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Key string `json:"key"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&in); err != nil || !payment.ValidKey(in.Key) {
		writeProblem(w, payment.Problem{Type: payment.ProblemInvalidRequest, Title: "Invalid request", Status: 400, Detail: `Send {"key": "<a new idempotency key>"}.`})
		return
	}
	req := payment.Request{Amount: 1999, Currency: "EUR", Source: "tok_visa", Description: "Crashed checkout"}
	then := h.Service.Now().Add(-h.Reconciler.StaleAfter - time.Minute)
	a := payment.NewAttempt(h.Scope, in.Key, req, then, h.Service.Lease)
	a.Provider = h.Service.ProviderName
	claimed, err := h.Service.Store.Claim(r.Context(), &a)
	if err != nil || !claimed {
		writeProblem(w, payment.Problem{Type: payment.ProblemKeyReused, Title: "Key already used", Status: 409, Detail: "Use a fresh key for the crash demo."})
		return
	}
	c, err := h.Service.Provider.Charge(r.Context(), payment.ChargeRequest{IdempotencyKey: payment.DownstreamKey(h.Scope, in.Key),
		Amount: req.Amount, Currency: req.Currency, Source: req.Source, Description: req.Description})
	res := map[string]string{"payment_id": a.ID, "key": in.Key, "charge_id": c.ID}
	if err != nil {
		res["charge_error"] = "the provider failed too; reconcile will find no charge"
	}
	writeJSON(w, http.StatusOK, res)
}

// handleReconcile runs one reconcile pass now, as cron would.
func (h *Handler) handleReconcile(w http.ResponseWriter, r *http.Request) {
	res, err := h.Reconciler.RunOnce(r.Context())
	if err != nil {
		writeProblem(w, payment.Problem{Type: payment.ProblemUnavailable, Title: "Reconcile failed", Status: 503, Detail: payment.ErrorMessage(err)})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"checked": res.Checked, "succeeded": res.Succeeded,
		"failed": res.Failed, "unknown": res.Unknown, "summary": res.String()})
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, payment.MaxBodyBytes))
	if err != nil {
		return nil, payment.Errorf(payment.EINVALID, "The body could not be read, or is over 64 KiB.")
	}
	return b, nil
}

func writeProblem(w http.ResponseWriter, p payment.Problem) { httpjson.Problem(w, p.Status, p) }

func writeRaw(w http.ResponseWriter, status int, body []byte) { httpjson.Answer(w, status, body) }

func writeJSON(w http.ResponseWriter, status int, v any) { httpjson.JSON(w, status, v) }
