// Package client is a Go client for oncepay's payment API that retries the
// way the API needs: a payment intent carries one Idempotency-Key, made when
// the intent is, and every attempt to pay it sends that same key.
//
// A lost answer is the case that matters. When a request times out or the
// connection drops, the client cannot know whether the payment was charged.
// Sending the request again with the same key is safe, because oncepay
// charges at most once per key and answers the retry with the outcome of the
// first. Sending it with a new key is a new payment: a double charge.
// That is why the key lives on the Intent, not on a request or an attempt,
// and why nothing here can change it.
//
//	c := &client.Client{BaseURL: "http://127.0.0.1:8080", APIKey: secret}
//	intent := client.NewIntent(client.PaymentRequest{Amount: 1999, Currency: "EUR", Source: "tok_visa"})
//	// Keep intent.Key() with the checkout, so a restarted process resumes it.
//	p, err := c.Pay(ctx, intent)
//	switch {
//	case err == nil && p.Status == client.StatusQueued: // accepted offline: Get it later
//	case err == nil: // charged: p.ChargeID
//	case client.IsDeclined(err): // final: ask for another card, then a new intent
//	case client.IsRetryable(err): // outcome unknown: Pay the same intent again later
//	default: // final: a bug in the request, or a key reused for another payment
//	}
//
// A refund is the same: one RefundIntent per refund decided, Refund sent
// again with it until a final answer.
//
// The package speaks the API the OpenAPI document (web/openapi.yaml)
// describes and imports nothing else of oncepay's.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client talks to one oncepay server. Its zero value, given a BaseURL, is
// ready to use; it is safe for concurrent use.
type Client struct {
	// BaseURL is the server's root, such as "http://127.0.0.1:8080".
	BaseURL string
	// APIKey is the merchant's secret, sent as "Authorization: Bearer". Empty
	// sends none, as demo mode needs.
	APIKey string
	// HTTPClient sends the requests; nil means one with a 30 s timeout per
	// attempt. Give it a timeout: a hung attempt is retried only once it ends.
	HTTPClient *http.Client
	// Backoff spaces the attempts; zero fields take their defaults.
	Backoff Backoff
}

// Backoff is exponential backoff with full jitter: before attempt n+1 the
// client waits a random time in [0, min(Max, Base*2^n)), and at least what
// the server asked for in Retry-After. The jitter spreads the retries of many
// clients that failed together, so they do not return together.
type Backoff struct {
	Base     time.Duration // default 100 ms
	Max      time.Duration // default 5 s
	Attempts int           // requests in all, the first included; default 10
}

const (
	defaultBase     = 100 * time.Millisecond
	defaultMax      = 5 * time.Second
	defaultAttempts = 10
	defaultTimeout  = 30 * time.Second
	// maxResponseBytes bounds what is read of a response: oncepay's are small,
	// and something else answering on that address must not exhaust memory.
	maxResponseBytes = 1 << 20
)

// defaultHTTPClient is shared, so clients without their own reuse connections.
var defaultHTTPClient = &http.Client{Timeout: defaultTimeout}

// Payment is a payment as oncepay reports it.
type Payment struct {
	ID             string            `json:"id"`
	Status         string            `json:"status"` // one of the Status constants
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	ChargeID       string            `json:"charge_id,omitempty"`
	FailureCode    string            `json:"failure_code,omitempty"`
	Description    string            `json:"description,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	AmountRefunded int64             `json:"amount_refunded"`
	Refunds        []Refund          `json:"refunds,omitempty"`
	// Dispute is the cardholder's dispute the provider told of, nil if
	// none; the payment's status stays succeeded.
	Dispute *Dispute `json:"dispute,omitempty"`
	// IdempotencyKey is empty once the key's record was purged.
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	// Replayed is true when this answer is the stored one of an earlier
	// request with the same key (the server's Idempotent-Replayed header).
	Replayed bool `json:"-"`
}

// Dispute is a payment's dispute, as the provider holds it.
type Dispute struct {
	ID     string `json:"id"`
	Status string `json:"status"` // Stripe's: needs_response, under_review, won, lost, ...
	Reason string `json:"reason,omitempty"`
	Amount int64  `json:"amount"`
}

// A payment's statuses.
const (
	StatusSucceeded  = "succeeded"
	StatusFailed     = "failed"
	StatusInProgress = "in_progress" // only from Get, while the first request runs
	// StatusQueued: the provider could not be reached and the merchant
	// takes payments offline: accepted (202), not yet charged. The
	// payment is forwarded when the link comes back; Get tells the outcome.
	StatusQueued = "queued"
	// StatusExpired: queued past the merchant's max age and never charged.
	StatusExpired = "expired"
)

// Refund is a refund as oncepay reports it.
type Refund struct {
	ID        string `json:"id"`
	PaymentID string `json:"payment_id"`
	// Status is "succeeded", "failed" or "in_progress". A refund the bank
	// failed after it succeeded is "failed" from Get and Refunds; the
	// refund request's replay still gets its first answer.
	Status           string    `json:"status"`
	Amount           int64     `json:"amount"`
	Currency         string    `json:"currency"`
	Reason           string    `json:"reason,omitempty"`
	ProviderRefundID string    `json:"provider_refund_id,omitempty"`
	FailureCode      string    `json:"failure_code,omitempty"`
	IdempotencyKey   string    `json:"idempotency_key,omitempty"`
	CreatedAt        time.Time `json:"created_at"`
	// Replayed is true when this answer is the stored one of an earlier
	// request with the same key.
	Replayed bool `json:"-"`
}

// Pay pays intent, retrying until it gets a final answer or runs out of
// attempts. Every attempt sends the intent's key and body unchanged.
//
// Network errors, 409 request-in-progress and every 5xx (503
// payment-outcome-unknown and service-unavailable among them) are retried:
// each leaves the outcome unknown, and a retry with the same key learns it
// without charging twice. Any other answer is final: 201 returns the
// payment, 202 the payment in StatusQueued (taken while the provider was
// unreachable, charged later: Get it to learn the outcome, and never pay
// the same sale with a new intent), the rest an *Error. When the attempts or ctx run out first, the
// error satisfies IsRetryable: Pay the same intent again later.
func (c *Client) Pay(ctx context.Context, intent *Intent) (*Payment, error) {
	p, replayed, err := send[Payment](ctx, c, http.MethodPost, "/v1/payments", intent.key, intent.body)
	if p != nil {
		p.Replayed = replayed
	}
	return p, err
}

// Refund gives back what intent asks of its payment, with Pay's retry
// rules: the intent's one key and body on every attempt, retried after no
// answer, 409 request-in-progress and 5xx, at least Retry-After apart. Any
// other answer is final: 201 returns the refund; 409 refund-exceeds-remaining,
// 409 payment-not-refundable, 402 refund-declined and refund-not-completed
// are an *Error (the last two name the refund: make a new intent for
// another try).
func (c *Client) Refund(ctx context.Context, intent *RefundIntent) (*Refund, error) {
	path := "/v1/payments/" + url.PathEscape(intent.paymentID) + "/refunds"
	r, replayed, err := send[Refund](ctx, c, http.MethodPost, path, intent.key, intent.body)
	if r != nil {
		r.Replayed = replayed
	}
	return r, err
}

// Get returns the payment with id, its refunds included, retried like Pay.
// A payment of another merchant, or none, is an *Error with status 404.
func (c *Client) Get(ctx context.Context, id string) (*Payment, error) {
	p, _, err := send[Payment](ctx, c, http.MethodGet, "/v1/payments/"+url.PathEscape(id), "", nil)
	return p, err
}

// ListParams selects a page of List: newest first, StartingAfter a
// payment id for the next, older page, EndingBefore one for the newer page;
// Status filters ("" for all); Limit 1-100 (0: the server's 10).
type ListParams struct {
	Status        string
	Limit         int
	StartingAfter string
	EndingBefore  string
}

// PaymentList is one page of List.
type PaymentList struct {
	Data    []Payment `json:"data"`
	HasMore bool      `json:"has_more"`
}

// List returns a page of the merchant's payments, retried like Get: a till
// reads what it still has queued with ListParams{Status: StatusQueued}.
func (c *Client) List(ctx context.Context, p ListParams) (*PaymentList, error) {
	l, _, err := send[PaymentList](ctx, c, http.MethodGet, listPath("/v1/payments", map[string]string{
		"status": p.Status, "starting_after": p.StartingAfter, "ending_before": p.EndingBefore}, p.Limit), "", nil)
	return l, err
}

// Event is one state change of a payment or a refund, as oncepay tells it:
// each change has exactly one, written with the change. ID is its identity
// forever: an event delivered twice has the same ID, so dedupe by it.
type Event struct {
	ID      string `json:"id"`
	Type    string `json:"type"`    // one of the Event constants
	Created int64  `json:"created"` // when the change was made, in Unix seconds
	Data    struct {
		// Object is the payment or refund as it was once the change was
		// made: Payment or Refund decodes it.
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

// The types of events.
const (
	EventPaymentSucceeded = "payment.succeeded"
	EventPaymentFailed    = "payment.failed" // declined, or reconciled as never charged
	EventPaymentQueued    = "payment.queued"
	EventPaymentExpired   = "payment.expired"
	EventRefundSucceeded  = "refund.succeeded"
	EventRefundFailed     = "refund.failed" // declined, or failed by the bank after it succeeded
	// EventPaymentDisputed: a dispute opened or moved (the payment stays
	// succeeded); EventPaymentDisputeClosed: it closed, won or lost.
	EventPaymentDisputed      = "payment.disputed"
	EventPaymentDisputeClosed = "payment.dispute_closed"
)

// Payment is the payment a payment.* event is about, as it was then.
func (e *Event) Payment() (*Payment, error) {
	if !strings.HasPrefix(e.Type, "payment.") {
		return nil, fmt.Errorf("event %s is a %s, not about a payment", e.ID, e.Type)
	}
	var p Payment
	return &p, json.Unmarshal(e.Data.Object, &p)
}

// Refund is the refund a refund.* event is about, as it was then.
func (e *Event) Refund() (*Refund, error) {
	if !strings.HasPrefix(e.Type, "refund.") {
		return nil, fmt.Errorf("event %s is a %s, not about a refund", e.ID, e.Type)
	}
	var r Refund
	return &r, json.Unmarshal(e.Data.Object, &r)
}

// EventListParams selects a page of Events: newest first, StartingAfter
// an event id for the next, older page, EndingBefore one for the newer
// page; Type filters ("" for all); Limit 1-100 (0: the server's 10).
type EventListParams struct {
	Type          string
	Limit         int
	StartingAfter string
	EndingBefore  string
}

// EventList is one page of Events.
type EventList struct {
	Data    []Event `json:"data"`
	HasMore bool    `json:"has_more"`
}

// Events returns a page of the merchant's events, retried like Get. To
// read every event since the last one seen: EndingBefore its id gives the
// events just after it (newest first within the page); then EndingBefore
// the first of that page, and so on while HasMore.
func (c *Client) Events(ctx context.Context, p EventListParams) (*EventList, error) {
	l, _, err := send[EventList](ctx, c, http.MethodGet, listPath("/v1/events", map[string]string{
		"type": p.Type, "starting_after": p.StartingAfter, "ending_before": p.EndingBefore}, p.Limit), "", nil)
	return l, err
}

// listPath is path with a list's query: the params given, and limit if set.
func listPath(path string, params map[string]string, limit int) string {
	q := url.Values{}
	for name, v := range params {
		if v != "" {
			q.Set(name, v)
		}
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return path
}

// send sends the request until a final answer and decodes a success into a
// T; key and body are empty for a GET. replayed is the server's
// Idempotent-Replayed.
func send[T any](ctx context.Context, c *Client, method, path, key string, body []byte) (v *T, replayed bool, err error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body) // the same bytes on every attempt, through GetBody
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.BaseURL, "/")+path, r)
	if err != nil {
		return nil, false, fmt.Errorf("oncepay: %w", err) // a bad BaseURL: final, as no attempt would do better
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if key != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	b := c.Backoff.withDefaults()
	for attempt := 0; ; attempt++ {
		v := new(T)
		replayed, retryAfter, err := c.attempt(req, v)
		if err == nil {
			return v, replayed, nil
		}
		if !IsRetryable(err) {
			return nil, false, err
		}
		if attempt+1 >= b.Attempts {
			return nil, false, fmt.Errorf("%w (gave up after %d attempts)", err, b.Attempts)
		}
		if cerr := sleep(ctx, max(b.delay(attempt), retryAfter)); cerr != nil {
			return nil, false, fmt.Errorf("%w (stopped waiting to retry: %w)", err, cerr)
		}
	}
}

// attempt sends one copy of req and decodes a success into v. retryAfter
// is the server's Retry-After, 0 if it sent none.
func (c *Client) attempt(req *http.Request, v any) (replayed bool, retryAfter time.Duration, err error) {
	r := req.Clone(req.Context())
	if req.GetBody != nil {
		if r.Body, err = req.GetBody(); err != nil {
			return false, 0, err
		}
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = defaultHTTPClient
	}
	where := req.Method + " " + req.URL.Path
	resp, err := hc.Do(r)
	if err != nil {
		return false, 0, fmt.Errorf("oncepay: %s: %w: %w", where, errNoAnswer, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return false, 0, fmt.Errorf("oncepay: %s: %w: read response: %w", where, errNoAnswer, err)
	}
	retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"))
	if resp.StatusCode/100 != 2 {
		return false, retryAfter, problemOf(resp, data)
	}
	if err := json.Unmarshal(data, v); err != nil {
		// Not final: whatever answered was not oncepay speaking its API, and
		// the money may have moved; the retry's replay says.
		return false, retryAfter, fmt.Errorf("oncepay: %s: %w: %d with an unreadable body: %w", where, errNoAnswer, resp.StatusCode, err)
	}
	return resp.Header.Get("Idempotent-Replayed") == "true", 0, nil
}

// problemOf builds the *Error of a non-2xx answer. A body that is not a
// problem (a proxy's error page, say) still gives the status.
func problemOf(resp *http.Response, data []byte) *Error {
	e := &Error{}
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/problem+json") || strings.HasPrefix(ct, "application/json") {
		json.Unmarshal(data, e) // best effort: the status below is what counts
	}
	e.Status = resp.StatusCode
	if e.Title == "" {
		e.Title = http.StatusText(resp.StatusCode)
	}
	return e
}

// parseRetryAfter reads a Retry-After of delay-seconds, the form oncepay
// sends; anything else counts as absent.
func parseRetryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

func (b Backoff) withDefaults() Backoff {
	if b.Base <= 0 {
		b.Base = defaultBase
	}
	if b.Max <= 0 {
		b.Max = defaultMax
	}
	if b.Attempts <= 0 {
		b.Attempts = defaultAttempts
	}
	return b
}

// delay is the full-jitter wait after the failed attempt number attempt
// (0 for the first).
func (b Backoff) delay(attempt int) time.Duration {
	ceiling := b.Max
	if attempt < 62 && b.Base < b.Max>>attempt { // Base*2^attempt < Max, without overflow
		ceiling = b.Base << attempt
	}
	return rand.N(ceiling)
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
