// Package fakestripe is a stateful stand-in for Stripe's API, for tests:
// stripe-mock checks parameters but keeps no state and ignores idempotency,
// so what oncepay does under retries is tested against this. It dedupes
// POSTs by Idempotency-Key the way Stripe documents (the first answer is
// saved and replayed; other parameters are an idempotency_error; a key
// still in flight gets 409), declines the test cards that decline, can drop
// a response after charging, and lags its Search.
package fakestripe

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Fake is a running fake Stripe.
type Fake struct {
	URL string

	mu       sync.Mutex
	key      string // the secret key it accepts
	saved    map[string]savedResponse
	inFlight map[string]bool
	intents  []*intent // in creation order
	refunds  []*refund // in creation order
	methods  map[string]string
	seq      int
	// Faults and counters, read and set under mu through the methods below.
	searchLag     time.Duration
	faults        Faults
	attempts      int // POST /v1/payment_intents requests received
	created       int // PaymentIntents created
	searchQueries int
	listQueries   int
	conflicts     int // 409s: a key still in flight
	dropped       int // answers never sent
}

type savedResponse struct {
	params string
	status int
	body   []byte
}

type intent struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Amount      int64             `json:"amount"`
	Currency    string            `json:"currency"`
	Status      string            `json:"status"`
	Metadata    map[string]string `json:"metadata"`
	Description *string           `json:"description"`
	Created     int64             `json:"created"`
	Livemode    bool              `json:"livemode"`
	LastError   *apiError         `json:"last_payment_error"`
	created     time.Time
}

type apiError struct {
	Type        string  `json:"type"`
	Code        string  `json:"code,omitempty"`
	DeclineCode string  `json:"decline_code,omitempty"`
	Message     string  `json:"message"`
	Intent      *intent `json:"payment_intent,omitempty"`
}

// New starts a fake that accepts secretKey, and stops it when the test ends.
// Search lags an hour unless SetSearchLag says otherwise.
func New(tb testing.TB, secretKey string) *Fake {
	f := &Fake{key: secretKey, saved: map[string]savedResponse{}, inFlight: map[string]bool{},
		methods: map[string]string{}, searchLag: time.Hour}
	srv := httptest.NewServer(f)
	tb.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// SetKey changes the secret key the fake accepts (a rotated or revoked key).
func (f *Fake) SetKey(k string) { f.mu.Lock(); f.key = k; f.mu.Unlock() }

// SetSearchLag sets how old a PaymentIntent must be before Search finds it.
func (f *Fake) SetSearchLag(d time.Duration) { f.mu.Lock(); f.searchLag = d; f.mu.Unlock() }

// Faults are what the fake does wrong, each by the request's
// Idempotency-Key (key) where it has one. A nil func never fires.
type Faults struct {
	// Delay is how long a PaymentIntent create keeps its key in flight.
	Delay func(key string) time.Duration
	// DropBefore closes the connection at once, unanswered, and goes on
	// creating the PaymentIntent: a retry meanwhile gets 409.
	DropBefore func(key string) bool
	// DropAfter creates the PaymentIntent or Refund, saves the answer, and
	// closes the connection unanswered: the lost response. It is asked again
	// for each replay of the saved answer, which it may lose too.
	DropAfter func(key string) bool
	// Inject answers any request with (status, body) when ok, before
	// anything else happens: nothing is created or saved.
	Inject func(r *http.Request) (status int, body string, ok bool)
}

// SetFaults replaces the faults.
func (f *Fake) SetFaults(fs Faults) { f.mu.Lock(); f.faults = fs; f.mu.Unlock() }

// Counts are the fake's figures.
type Counts struct {
	Attempts       int // POST /v1/payment_intents requests received
	Created        int // PaymentIntents created
	SearchQueries  int
	ListQueries    int
	Conflicts      int               // 409s answered while a key was in flight
	Dropped        int               // connections closed unanswered
	IntentsByKey   map[string]int    // PaymentIntents per oncepay_key
	SucceededByKey map[string]string // the succeeded PaymentIntent's id per oncepay_key
	RefundsByKey   map[string]int    // Refunds per oncepay_key
}

// Counts returns the fake's figures so far.
func (f *Fake) Counts() Counts {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := Counts{Attempts: f.attempts, Created: f.created, SearchQueries: f.searchQueries, ListQueries: f.listQueries,
		Conflicts: f.conflicts, Dropped: f.dropped,
		IntentsByKey: map[string]int{}, SucceededByKey: map[string]string{}, RefundsByKey: map[string]int{}}
	for _, pi := range f.intents {
		k := pi.Metadata["oncepay_key"]
		c.IntentsByKey[k]++
		if pi.Status == "succeeded" {
			c.SucceededByKey[k] = pi.ID
		}
	}
	for _, r := range f.refunds {
		c.RefundsByKey[r.Metadata["oncepay_key"]]++
	}
	return c
}

func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	key, inject := f.key, f.faults.Inject
	f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+key {
		writeError(w, http.StatusUnauthorized, apiError{Type: "invalid_request_error", Message: "Invalid API Key provided."})
		return
	}
	if inject != nil {
		if status, body, ok := inject(r); ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			w.Write([]byte(body))
			return
		}
	}
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Message: "bad form"})
		return
	}
	switch {
	case r.Method == "POST" && r.URL.Path == "/v1/payment_intents":
		f.idempotent(w, r, f.createIntent)
	case r.Method == "POST" && r.URL.Path == "/v1/payment_methods":
		f.idempotent(w, r, f.createMethod)
	case r.Method == "GET" && r.URL.Path == "/v1/payment_intents":
		f.list(w, r)
	case r.Method == "GET" && r.URL.Path == "/v1/payment_intents/search":
		f.search(w, r)
	case r.Method == "POST" && r.URL.Path == "/v1/refunds":
		f.idempotent(w, r, f.createRefund)
	case r.Method == "GET" && r.URL.Path == "/v1/refunds":
		f.listRefunds(w, r)
	default:
		writeError(w, http.StatusNotFound, apiError{Type: "invalid_request_error", Message: "Unrecognized request URL."})
	}
}

// idempotent runs create once per Idempotency-Key, as Stripe does: the
// first answer is saved and replayed to a retry with the same parameters.
func (f *Fake) idempotent(w http.ResponseWriter, r *http.Request, create func(form url.Values) (int, any)) {
	ikey := r.Header.Get("Idempotency-Key")
	params := r.URL.Path + "?" + r.PostForm.Encode() // Encode sorts by key
	f.mu.Lock()
	if r.URL.Path == "/v1/payment_intents" {
		f.attempts++
	}
	if ikey == "" {
		f.mu.Unlock()
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Message: "this fake wants an Idempotency-Key on every POST"})
		return
	}
	if f.inFlight[ikey] {
		f.conflicts++
		f.mu.Unlock()
		writeError(w, http.StatusConflict, apiError{Type: "idempotency_error", Code: "idempotency_key_in_use",
			Message: "There is currently another in-progress request using this Idempotent Key."})
		return
	}
	moves := r.URL.Path == "/v1/payment_intents" || r.URL.Path == "/v1/refunds"
	if s, ok := f.saved[ikey]; ok {
		drop := f.faults.DropAfter
		f.mu.Unlock()
		if s.params != params {
			writeError(w, http.StatusBadRequest, apiError{Type: "idempotency_error",
				Message: "Keys for idempotent requests can only be used with the same parameters they were first used with."})
			return
		}
		if moves && drop != nil && drop(ikey) && hangUp(w) {
			f.mu.Lock()
			f.dropped++
			f.mu.Unlock()
			return // the saved answer is lost again
		}
		w.Header().Set("Idempotent-Replayed", "true")
		writeRaw(w, s.status, s.body)
		return
	}
	f.inFlight[ikey] = true
	fs := f.faults
	f.mu.Unlock()
	intents := r.URL.Path == "/v1/payment_intents"
	dropped := intents && fs.DropBefore != nil && fs.DropBefore(ikey) && hangUp(w)
	if intents && fs.Delay != nil {
		time.Sleep(fs.Delay(ikey))
	}

	f.mu.Lock()
	status, v := create(r.PostForm)
	body, err := json.Marshal(v)
	if err != nil {
		panic("fakestripe: " + err.Error())
	}
	f.saved[ikey] = savedResponse{params: params, status: status, body: body}
	delete(f.inFlight, ikey)
	f.mu.Unlock()
	if dropped || moves && fs.DropAfter != nil && fs.DropAfter(ikey) && hangUp(w) {
		f.mu.Lock()
		f.dropped++
		f.mu.Unlock()
		return // charged and saved; the caller never hears
	}
	writeRaw(w, status, body)
}

// hangUp closes the connection without an answer.
func hangUp(w http.ResponseWriter) bool {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return false
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// createIntent creates and confirms a PaymentIntent; f.mu is held.
func (f *Fake) createIntent(form url.Values) (int, any) {
	amount, err := strconv.ParseInt(form.Get("amount"), 10, 64)
	if err != nil || amount <= 0 || len(form.Get("currency")) != 3 || form.Get("currency") != strings.ToLower(form.Get("currency")) {
		return http.StatusBadRequest, errorBody(apiError{Type: "invalid_request_error", Code: "parameter_invalid_integer", Message: "bad amount or currency"})
	}
	if form.Get("confirm") != "true" {
		return http.StatusBadRequest, errorBody(apiError{Type: "invalid_request_error", Message: "this fake only creates confirmed intents"})
	}
	pm := form.Get("payment_method")
	card := pm
	if tok, ok := f.methods[pm]; ok {
		card = tok
	}
	f.seq++
	f.created++
	now := time.Now()
	pi := &intent{ID: fmt.Sprintf("pi_fake%06d", f.seq), Object: "payment_intent", Amount: amount,
		Currency: form.Get("currency"), Metadata: map[string]string{}, Created: now.Unix(), created: now}
	for k, v := range form {
		if strings.HasPrefix(k, "metadata[") {
			pi.Metadata[strings.TrimSuffix(strings.TrimPrefix(k, "metadata["), "]")] = v[0]
		}
	}
	if d := form.Get("description"); d != "" {
		pi.Description = &d
	}
	f.intents = append(f.intents, pi)
	if code, ok := declines[strings.TrimPrefix(strings.TrimPrefix(card, "pm_card_"), "tok_")]; ok {
		pi.Status = "requires_payment_method"
		e := apiError{Type: "card_error", Code: "card_declined", DeclineCode: code, Message: "Your card was declined."}
		last := e
		pi.LastError = &last
		cp := *pi
		e.Intent = &cp
		return http.StatusPaymentRequired, errorBody(e)
	}
	pi.Status = "succeeded"
	return http.StatusOK, pi
}

type refund struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentIntent string            `json:"payment_intent"`
	Status        string            `json:"status"`
	Reason        *string           `json:"reason"`
	Metadata      map[string]string `json:"metadata"`
	Created       int64             `json:"created"`
}

// createRefund refunds part of a succeeded PaymentIntent, never more than
// is left of it, as Stripe does; f.mu is held.
func (f *Fake) createRefund(form url.Values) (int, any) {
	var pi *intent
	for _, p := range f.intents {
		if p.ID == form.Get("payment_intent") {
			pi = p
		}
	}
	if pi == nil || pi.Status != "succeeded" {
		return http.StatusBadRequest, errorBody(apiError{Type: "invalid_request_error", Code: "resource_missing", Message: "No such payment_intent."})
	}
	left := pi.Amount
	for _, r := range f.refunds {
		if r.PaymentIntent == pi.ID {
			left -= r.Amount
		}
	}
	amount := left
	if v := form.Get("amount"); v != "" {
		amount, _ = strconv.ParseInt(v, 10, 64)
	}
	if amount <= 0 || amount > left {
		return http.StatusBadRequest, errorBody(apiError{Type: "invalid_request_error", Code: "amount_too_large",
			Message: "Refund amount is greater than unrefunded amount on charge."})
	}
	f.seq++
	rf := &refund{ID: fmt.Sprintf("re_fake%06d", f.seq), Object: "refund", Amount: amount, Currency: pi.Currency,
		PaymentIntent: pi.ID, Status: "succeeded", Metadata: map[string]string{}, Created: time.Now().Unix()}
	if v := form.Get("reason"); v != "" {
		rf.Reason = &v
	}
	for k, v := range form {
		if strings.HasPrefix(k, "metadata[") {
			rf.Metadata[strings.TrimSuffix(strings.TrimPrefix(k, "metadata["), "]")] = v[0]
		}
	}
	f.refunds = append(f.refunds, rf)
	return http.StatusOK, rf
}

// listRefunds serves GET /v1/refunds?payment_intent=: newest first, paged
// by starting_after, strongly consistent.
func (f *Fake) listRefunds(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 || limit > 100 {
		limit = 10
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []*refund
	for i := len(f.refunds) - 1; i >= 0; i-- {
		if pi := q.Get("payment_intent"); pi == "" || f.refunds[i].PaymentIntent == pi {
			all = append(all, f.refunds[i])
		}
	}
	if after := q.Get("starting_after"); after != "" {
		for i, rf := range all {
			if rf.ID == after {
				all = all[i+1:]
				break
			}
		}
	}
	more := len(all) > limit
	if more {
		all = all[:limit]
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "url": "/v1/refunds", "has_more": more, "data": all})
}

// SetRefundStatus changes the status of the refund made under the
// downstream key key, as Stripe does when a card refund fails after it was
// made. The answer saved for the key keeps the status it was made with.
func (f *Fake) SetRefundStatus(key, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.refunds {
		if r.Metadata["oncepay_key"] == key {
			r.Status = status
		}
	}
}

// Refunded returns the total refunded of each PaymentIntent.
func (f *Fake) Refunded() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string]int64{}
	for _, r := range f.refunds {
		m[r.PaymentIntent] += r.Amount
	}
	return m
}

// declines are Stripe's test cards that decline, by name after pm_card_ or tok_.
var declines = map[string]string{
	"chargeDeclined":                       "generic_decline",
	"chargeDeclinedInsufficientFunds":      "insufficient_funds",
	"visa_chargeDeclinedInsufficientFunds": "insufficient_funds",
	"chargeDeclinedExpiredCard":            "expired_card",
}

// createMethod makes a PaymentMethod from card[token]; f.mu is held.
func (f *Fake) createMethod(form url.Values) (int, any) {
	tok := form.Get("card[token]")
	if form.Get("type") != "card" || !strings.HasPrefix(tok, "tok_") {
		return http.StatusBadRequest, errorBody(apiError{Type: "invalid_request_error", Message: "want type=card and card[token]"})
	}
	f.seq++
	id := fmt.Sprintf("pm_fake%06d", f.seq)
	f.methods[id] = tok
	return http.StatusOK, map[string]any{"id": id, "object": "payment_method", "type": "card"}
}

// list serves GET /v1/payment_intents: newest first, created[gte] honoured,
// paged by starting_after. It is strongly consistent, as Stripe's is.
func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 || limit > 100 {
		limit = 10
	}
	var gte int64
	if v := q.Get("created[gte]"); v != "" {
		gte, _ = strconv.ParseInt(v, 10, 64)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listQueries++
	var all []*intent
	for i := len(f.intents) - 1; i >= 0; i-- {
		if f.intents[i].Created >= gte {
			all = append(all, f.intents[i])
		}
	}
	if after := q.Get("starting_after"); after != "" {
		for i, pi := range all {
			if pi.ID == after {
				all = all[i+1:]
				break
			}
		}
	}
	more := len(all) > limit
	if more {
		all = all[:limit]
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "url": "/v1/payment_intents", "has_more": more, "data": all})
}

var searchQuery = regexp.MustCompile(`^metadata\['([a-z_]+)'\]:'([^']*)'$`)

// search serves GET /v1/payment_intents/search, lagging: a PaymentIntent
// younger than the lag is not found yet.
func (f *Fake) search(w http.ResponseWriter, r *http.Request) {
	m := searchQuery.FindStringSubmatch(r.URL.Query().Get("query"))
	if m == nil {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Message: "this fake searches metadata only"})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.searchQueries++
	data := []*intent{}
	for _, pi := range f.intents {
		if pi.Metadata[m[1]] == m[2] && time.Since(pi.created) >= f.searchLag {
			data = append(data, pi)
		}
	}
	sort.SliceStable(data, func(i, j int) bool { return data[i].Created > data[j].Created })
	writeJSON(w, http.StatusOK, map[string]any{"object": "search_result", "url": "/v1/payment_intents/search", "has_more": false, "data": data})
}

func errorBody(e apiError) map[string]any { return map[string]any{"error": e} }

func writeError(w http.ResponseWriter, status int, e apiError) { writeJSON(w, status, errorBody(e)) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	writeRaw(w, status, b)
}

func writeRaw(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}
