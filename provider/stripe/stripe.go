// Package stripe is a payment.Provider on Stripe: a charge is a
// PaymentIntent created and confirmed in one call under oncepay's downstream
// idempotency key, and a lookup reads Stripe's strongly consistent list of
// PaymentIntents, since Stripe has no lookup by idempotency key and its
// Search lags.
package stripe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	stripe "github.com/stripe/stripe-go/v85"

	"github.com/oncepay/oncepay/payment"
)

// Metadata keys oncepay sets on every PaymentIntent.
const (
	MetaKey     = "oncepay_key"     // the downstream idempotency key
	MetaPayment = "oncepay_payment" // oncepay's payment id
	MetaRefund  = "oncepay_refund"  // oncepay's refund id
)

// KeyWindow is how long Stripe keeps an idempotency key (at least 24
// hours): oncepay's retention must not be longer, or a late retry of a
// forgotten key would reach Stripe as a new payment.
const KeyWindow = 24 * time.Hour

// DefaultMaxNetworkRetries is how often the SDK retries one call that
// failed in transit (a dropped connection, a 409, a 5xx), always with the
// same Idempotency-Key.
const DefaultMaxNetworkRetries = 2

// Bounds of Lookup's consistent read.
const (
	// clockSkew is how far Stripe's clock may be behind oncepay's: the list
	// starts this long before the attempt was claimed.
	clockSkew = time.Hour
	// maxListed bounds the PaymentIntents one lookup reads; a window with
	// more is an error, never a "not found".
	maxListed = 10_000
)

// Config configures a Client.
type Config struct {
	// SecretKey is a secret (sk_) or restricted (rk_) key, test or live.
	SecretKey string
	// URL is the API's base URL; empty means Stripe's own. Tests point it at
	// stripe-mock or a fake.
	URL string
	// MaxNetworkRetries: see DefaultMaxNetworkRetries. 0 disables retries.
	MaxNetworkRetries int64
}

// Client is a payment.Provider on Stripe, safe for concurrent use.
type Client struct {
	sc   *stripe.Client
	key  string
	live bool
}

var (
	_ payment.Provider      = (*Client)(nil)
	_ payment.DisputeLooker = (*Client)(nil)
)

// KeyMode reports whether key is a test or a live Stripe key, and refuses
// anything else (a publishable key, a typo).
func KeyMode(key string) (live bool, err error) {
	for _, p := range []string{"sk_", "rk_"} {
		switch {
		case strings.HasPrefix(key, p+"test_") && len(key) > len(p)+5:
			return false, nil
		case strings.HasPrefix(key, p+"live_") && len(key) > len(p)+5:
			return true, nil
		}
	}
	return false, errors.New("not a Stripe secret or restricted key (want sk_test_, sk_live_, rk_test_ or rk_live_)")
}

// New returns a client for cfg. It makes no call: Check does.
func New(cfg Config) (*Client, error) {
	live, err := KeyMode(cfg.SecretKey)
	if err != nil {
		return nil, err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64 // many payments in flight to one host
	bc := &stripe.BackendConfig{
		// The caller's context bounds each call; this only stops a call
		// made without a deadline from hanging.
		HTTPClient:        &http.Client{Timeout: 2 * time.Minute, Transport: t},
		MaxNetworkRetries: stripe.Int64(cfg.MaxNetworkRetries),
		// oncepay logs what it decides; the SDK's own lines could carry
		// request data.
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	}
	if cfg.URL != "" {
		bc.URL = stripe.String(strings.TrimSuffix(cfg.URL, "/"))
	}
	sc := stripe.NewClient(cfg.SecretKey, stripe.WithBackends(stripe.NewBackendsWithConfig(bc)))
	return &Client{sc: sc, key: cfg.SecretKey, live: live}, nil
}

// Live reports whether the client moves real money.
func (c *Client) Live() bool { return c.live }

// Check makes one read, so a key Stripe refuses stops oncepay at start
// rather than at the first payment. A refused key wraps
// payment.ErrProviderUnavailable.
func (c *Client) Check(ctx context.Context) error {
	p := &stripe.PaymentIntentListParams{}
	p.Limit = stripe.Int64(1)
	p.Single = true
	for _, err := range c.sc.V1PaymentIntents.List(ctx, p).All(ctx) {
		if err != nil {
			return c.classify("check", err)
		}
	}
	return nil
}

// Charge creates and confirms a PaymentIntent under req.IdempotencyKey.
// A token (tok_...) is first made into a PaymentMethod under a key derived
// from the same one. A payment that would need the customer to act (3-D
// Secure, a redirect) is refused, never left waiting.
func (c *Client) Charge(ctx context.Context, req payment.ChargeRequest) (payment.Charge, error) {
	pm := req.Source
	if strings.HasPrefix(pm, "tok_") {
		var err error
		if pm, err = c.paymentMethodFromToken(ctx, req.IdempotencyKey, pm); err != nil {
			return payment.Charge{}, err
		}
	}
	p := &stripe.PaymentIntentCreateParams{
		Amount:        stripe.Int64(req.Amount),
		Currency:      stripe.String(strings.ToLower(req.Currency)), // Stripe's form
		PaymentMethod: stripe.String(pm),
		Confirm:       stripe.Bool(true),
		AutomaticPaymentMethods: &stripe.PaymentIntentCreateAutomaticPaymentMethodsParams{
			Enabled:        stripe.Bool(true),
			AllowRedirects: stripe.String("never"),
		},
		// A step oncepay cannot ask the customer for fails the confirm (a
		// card error, stored as a decline) instead of leaving it pending.
		ErrorOnRequiresAction: stripe.Bool(true),
		Metadata:              map[string]string{MetaKey: req.IdempotencyKey, MetaPayment: req.PaymentID},
	}
	if req.Description != "" {
		p.Description = stripe.String(req.Description)
	}
	p.IdempotencyKey = stripe.String(req.IdempotencyKey)
	pi, err := c.sc.V1PaymentIntents.Create(ctx, p)
	if err != nil {
		return payment.Charge{}, c.classify("charge", err)
	}
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded:
		return chargeOf(pi, req.IdempotencyKey), nil
	case stripe.PaymentIntentStatusRequiresAction:
		return payment.Charge{}, &payment.DeclineError{Code: "requires_action",
			Message: "The payment needs the customer to authenticate or be redirected, which oncepay does not support; nothing was charged."}
	default: // processing, or a state a confirmed card payment should not be in
		return payment.Charge{}, fmt.Errorf("stripe: charge: PaymentIntent %s is %s after confirm", pi.ID, pi.Status)
	}
}

// paymentMethodFromToken makes a card token into a PaymentMethod, Stripe's
// documented way to use a token with PaymentIntents. Its key is derived from
// the charge's, so a retry gets the same PaymentMethod and the
// PaymentIntent's parameters stay the same.
func (c *Client) paymentMethodFromToken(ctx context.Context, key, token string) (string, error) {
	p := &stripe.PaymentMethodCreateParams{
		Type: stripe.String("card"),
		Card: &stripe.PaymentMethodCreateCardParams{Token: stripe.String(token)},
	}
	p.IdempotencyKey = stripe.String(key + "_pm")
	pm, err := c.sc.V1PaymentMethods.Create(ctx, p)
	if err != nil {
		return "", c.classify("payment method", err)
	}
	return pm.ID, nil
}

// Lookup finds the PaymentIntent oncepay created under req.IdempotencyKey.
// Search is only a fast path to "found": it lags, so its silence proves
// nothing. "Not found" comes only from the list of every PaymentIntent
// created since the attempt was claimed (less clockSkew), which Stripe
// serves strongly consistent, matched on the oncepay_key metadata.
func (c *Client) Lookup(ctx context.Context, req payment.LookupRequest) (payment.Charge, bool, error) {
	if pi := c.search(ctx, req.IdempotencyKey); pi != nil {
		return chargeOf(pi, req.IdempotencyKey), true, nil
	}
	p := &stripe.PaymentIntentListParams{}
	p.Limit = stripe.Int64(100)
	if !req.CreatedAt.IsZero() {
		p.CreatedRange = &stripe.RangeQueryParams{GreaterThanOrEqual: req.CreatedAt.Add(-clockSkew).Unix()}
	}
	var (
		found  []*stripe.PaymentIntent
		listed int
	)
	for pi, err := range c.sc.V1PaymentIntents.List(ctx, p).All(ctx) {
		if err != nil {
			return payment.Charge{}, false, c.classify("lookup", err)
		}
		if listed++; listed > maxListed {
			return payment.Charge{}, false, fmt.Errorf("stripe: lookup: more than %d PaymentIntents since the attempt; not answering", maxListed)
		}
		if pi.Metadata[MetaKey] == req.IdempotencyKey {
			found = append(found, pi)
		}
	}
	switch len(found) {
	case 0:
		return payment.Charge{}, false, nil
	case 1:
	default:
		return payment.Charge{}, false, fmt.Errorf("stripe: lookup: %d PaymentIntents carry this key; not answering", len(found))
	}
	pi := found[0]
	switch {
	case pi.Status == stripe.PaymentIntentStatusSucceeded:
		return chargeOf(pi, req.IdempotencyKey), true, nil
	case pi.Status == stripe.PaymentIntentStatusCanceled,
		pi.Status == stripe.PaymentIntentStatusRequiresAction,                                      // refused by Charge; no one holds its client secret
		pi.Status == stripe.PaymentIntentStatusRequiresPaymentMethod && pi.LastPaymentError != nil: // declined
		return payment.Charge{}, false, nil
	default: // processing, or caught mid-confirm: not known yet
		return payment.Charge{}, false, fmt.Errorf("stripe: lookup: PaymentIntent %s is %s; not final", pi.ID, pi.Status)
	}
}

// search returns the succeeded PaymentIntent Search finds under key, or
// nil for anything else: an error, nothing, or an answer that may be stale.
func (c *Client) search(ctx context.Context, key string) *stripe.PaymentIntent {
	p := &stripe.PaymentIntentSearchParams{}
	p.Query = fmt.Sprintf("metadata['%s']:'%s'", MetaKey, key) // the key is hex: nothing to escape
	p.Single = true
	var hit *stripe.PaymentIntent
	for pi, err := range c.sc.V1PaymentIntents.Search(ctx, p).All(ctx) {
		if err != nil || pi.Metadata[MetaKey] != key || hit != nil {
			return nil
		}
		hit = pi
	}
	if hit == nil || hit.Status != stripe.PaymentIntentStatusSucceeded {
		return nil
	}
	return hit
}

// Refund creates a Refund of the PaymentIntent req.ChargeID under
// req.IdempotencyKey, carrying the key in its metadata for LookupRefund. A
// pending refund is one Stripe has taken (card refunds settle later and
// rarely fail; a failure arrives as an event); a failed or canceled one
// gave nothing back.
func (c *Client) Refund(ctx context.Context, req payment.ProviderRefundRequest) (payment.ProviderRefund, error) {
	p := &stripe.RefundCreateParams{
		PaymentIntent: stripe.String(req.ChargeID),
		Amount:        stripe.Int64(req.Amount),
		Metadata:      map[string]string{MetaKey: req.IdempotencyKey, MetaRefund: req.RefundID, MetaPayment: req.PaymentID},
	}
	if req.Reason != "" {
		p.Reason = stripe.String(req.Reason) // oncepay accepts only Stripe's reasons
	}
	p.IdempotencyKey = stripe.String(req.IdempotencyKey)
	r, err := c.sc.V1Refunds.Create(ctx, p)
	if err != nil {
		return payment.ProviderRefund{}, c.classify("refund", err)
	}
	return c.refundResult(r, req.IdempotencyKey, req.ChargeID)
}

// LookupRefund finds the Refund oncepay created under req.IdempotencyKey
// in the list of the PaymentIntent's refunds, which Stripe serves strongly
// consistent, matched on the oncepay_key metadata.
func (c *Client) LookupRefund(ctx context.Context, req payment.RefundLookup) (payment.ProviderRefund, bool, error) {
	p := &stripe.RefundListParams{PaymentIntent: stripe.String(req.ChargeID)}
	p.Limit = stripe.Int64(100)
	var (
		found  []*stripe.Refund
		listed int
	)
	for r, err := range c.sc.V1Refunds.List(ctx, p).All(ctx) {
		if err != nil {
			return payment.ProviderRefund{}, false, c.classify("refund lookup", err)
		}
		if listed++; listed > maxListed {
			return payment.ProviderRefund{}, false, fmt.Errorf("stripe: refund lookup: more than %d refunds; not answering", maxListed)
		}
		if r.Metadata[MetaKey] == req.IdempotencyKey {
			found = append(found, r)
		}
	}
	switch len(found) {
	case 0:
		return payment.ProviderRefund{}, false, nil
	case 1:
	default:
		return payment.ProviderRefund{}, false, fmt.Errorf("stripe: refund lookup: %d refunds carry this key; not answering", len(found))
	}
	// A refund that failed or was canceled is a *DeclineError: it gave
	// nothing back, and a create under its key would only replay the answer
	// Stripe saved when it was made.
	r, err := c.refundResult(found[0], req.IdempotencyKey, req.ChargeID)
	return r, err == nil, err
}

// refundResult reads a Refund's status: made (succeeded, or pending and
// taken), gave nothing back (failed, canceled: a decline), or not known.
func (c *Client) refundResult(r *stripe.Refund, key, chargeID string) (payment.ProviderRefund, error) {
	switch r.Status {
	case stripe.RefundStatusSucceeded, stripe.RefundStatusPending:
		return payment.ProviderRefund{ID: r.ID, IdempotencyKey: key, ChargeID: chargeID, Amount: r.Amount,
			Currency: strings.ToUpper(string(r.Currency)), CreatedAt: time.Unix(r.Created, 0).UTC()}, nil
	case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
		code := c.redact(string(r.FailureReason)) // stored and shown as Stripe wrote it
		if code == "" {
			code = "refund_" + string(r.Status)
		}
		return payment.ProviderRefund{}, &payment.DeclineError{Code: code, Message: "Stripe did not make the refund; nothing was given back."}
	default: // requires_action, or a status this code does not know
		return payment.ProviderRefund{}, fmt.Errorf("stripe: refund %s is %s; not final", r.ID, r.Status)
	}
}

// LookupDispute retrieves the Dispute id with its PaymentIntent, whose
// metadata names oncepay's payment. One Stripe does not have is
// payment.ErrNoDispute.
func (c *Client) LookupDispute(ctx context.Context, id string) (payment.ProviderDispute, error) {
	p := &stripe.DisputeRetrieveParams{}
	p.AddExpand("payment_intent")
	d, err := c.sc.V1Disputes.Retrieve(ctx, id, p)
	var se *stripe.Error
	if errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound {
		return payment.ProviderDispute{}, fmt.Errorf("stripe: dispute %s: %w", id, payment.ErrNoDispute)
	}
	if err != nil {
		return payment.ProviderDispute{}, &redacted{fmt.Errorf("stripe: dispute lookup: %w", err), c.key}
	}
	pd := payment.ProviderDispute{
		Dispute:  payment.Dispute{ID: d.ID, Status: string(d.Status), Reason: string(d.Reason), Amount: d.Amount},
		Currency: strings.ToUpper(string(d.Currency)),
	}
	if pi := d.PaymentIntent; pi != nil {
		pd.ChargeID, pd.PaymentID = pi.ID, pi.Metadata[MetaPayment]
	}
	return pd, nil
}

func chargeOf(pi *stripe.PaymentIntent, key string) payment.Charge {
	return payment.Charge{
		ID:             pi.ID,
		IdempotencyKey: key,
		Amount:         pi.Amount,
		Currency:       strings.ToUpper(string(pi.Currency)),
		CreatedAt:      time.Unix(pi.Created, 0).UTC(),
	}
}

// classify turns a failed call into what payment.Provider callers decide
// on. Only answers that prove nothing was charged are definitive; the rest
// (409 while the key is in flight, 429, 5xx, timeouts, a lost connection) is
// an unknown outcome. Stripe's message is kept only for a decline, where it
// is meant for the customer; the secret key never reaches an error, nor the
// codes stored and shown with a decline.
func (c *Client) classify(op string, err error) error {
	var se *stripe.Error
	if !errors.As(err, &se) {
		return &redacted{fmt.Errorf("stripe: %s: %w", op, err), c.key}
	}
	status := se.HTTPStatusCode
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return fmt.Errorf("stripe: %s: status %d (%s): %w", op, status, se.Type, payment.ErrProviderUnavailable)
	case status == http.StatusConflict || status == http.StatusTooManyRequests || status >= 500:
		return fmt.Errorf("stripe: %s: status %d (%s %s): outcome unknown", op, status, se.Type, c.redact(string(se.Code)))
	case se.Type == stripe.ErrorTypeCard:
		return &payment.DeclineError{Code: c.redact(declineCode(se)), Message: c.redact(se.Msg)}
	case se.Type == stripe.ErrorTypeIdempotency:
		return fmt.Errorf("stripe: %s: %w", op, payment.ErrProviderKeyReused)
	case se.Type == stripe.ErrorTypeInvalidRequest && (status == http.StatusBadRequest || status == http.StatusNotFound):
		// Stripe refused the parameters (a payment method that does not
		// exist, an amount below its minimum): nothing was charged, and the
		// same request gets the same answer.
		code := c.redact(string(se.Code))
		if code == "" {
			code = "invalid_request"
		}
		return &payment.DeclineError{Code: code, Message: "Stripe refused the payment's parameters; nothing was charged."}
	default:
		return fmt.Errorf("stripe: %s: status %d (%s %s): outcome unknown", op, status, se.Type, c.redact(string(se.Code)))
	}
}

// redact hides the secret key in text a Stripe answer carries (a message,
// a code), which oncepay stores, shows or logs.
func (c *Client) redact(s string) string { return redactKey(s, c.key) }

func redactKey(s, key string) string { return strings.ReplaceAll(s, key, "[redacted]") }

// redacted hides the secret key in an error's text (a transport error may
// quote a response body), keeping what it wraps.
type redacted struct {
	err error
	key string
}

func (r *redacted) Error() string { return redactKey(r.err.Error(), r.key) }
func (r *redacted) Unwrap() error { return r.err }
