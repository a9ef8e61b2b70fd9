package sim

import (
	"bytes"
	"context"
	"crypto/hmac"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// The simulated provider's events, signed the Standard Webhooks way: the
// headers webhook-id, webhook-timestamp (Unix seconds) and
// webhook-signature ("v1,<base64 HMAC-SHA256>", space-separated if many),
// the HMAC over "id.timestamp.body" keyed with the secret's bytes (the
// base64 after "whsec_").
const (
	EventChargeSucceeded = "charge.succeeded"
	EventChargeFailed    = "charge.failed"
	// A refund made, and a refund the bank failed (maybe after it
	// succeeded: FailRefund, the fail_refund_later knob).
	EventRefundSucceeded = "refund.succeeded"
	EventRefundFailed    = "refund.failed"
	// A charge disputed, and its dispute closed (won or lost), as Stripe
	// names them.
	EventDisputeCreated = "charge.dispute.created"
	EventDisputeClosed  = "charge.dispute.closed"

	secretPrefix = "whsec_"
	// Tolerance is how far a webhook-timestamp may be from the receiver's
	// clock, either way.
	Tolerance = 5 * time.Minute
	// ShortKeyBytes is the key length below which a secret works (the
	// Standard Webhooks libraries take any key that is not empty) but is
	// easier to guess.
	ShortKeyBytes = 16
)

// NewWebhookSecret returns a fresh signing secret.
func NewWebhookSecret() string {
	return secretPrefix + base64.StdEncoding.EncodeToString([]byte(crand.Text()))
}

// secretKey is the HMAC key of a secret, taken as the Standard Webhooks
// libraries take it: "whsec_" and the key in base64, the prefix optional
// and the padding too.
func secretKey(secret string) ([]byte, error) {
	enc := strings.TrimPrefix(secret, secretPrefix)
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		b, err = base64.RawStdEncoding.DecodeString(enc)
	}
	if err != nil || len(b) == 0 {
		return nil, errors.New(`sim: a webhook secret is a key in base64 ("whsec_" before it is optional)`)
	}
	return b, nil
}

// CheckWebhookSecret reports whether secret can sign and verify.
func CheckWebhookSecret(secret string) error {
	_, err := secretKey(secret)
	return err
}

// ShortWebhookSecret reports whether secret is valid but its key is shorter
// than ShortKeyBytes: it works, and is easier to guess.
func ShortWebhookSecret(secret string) bool {
	b, err := secretKey(secret)
	return err == nil && len(b) < ShortKeyBytes
}

func sign(key []byte, id string, ts int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s.%d.", id, ts)
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// SignWebhook returns the headers that sign body as event id at ts.
func SignWebhook(secret, id string, ts time.Time, body []byte) (http.Header, error) {
	key, err := secretKey(secret)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	h.Set("webhook-signature", sign(key, id, ts.Unix(), body))
	return h, nil
}

// ErrBadSignature is any webhook that fails verification: no signature, a
// wrong one, or a timestamp outside the tolerance.
var ErrBadSignature = errors.New("sim: webhook signature does not verify")

// webhookBody is the body of the sim's events.
type webhookBody struct {
	Type      string      `json:"type"`
	Timestamp time.Time   `json:"timestamp"`
	Data      webhookData `json:"data"`
}

type webhookData struct {
	ChargeID       string    `json:"id,omitempty"`
	IdempotencyKey string    `json:"idempotency_key"`
	PaymentID      string    `json:"payment_id,omitempty"`
	Amount         int64     `json:"amount"`
	Currency       string    `json:"currency"`
	CreatedAt      time.Time `json:"created_at"`
	FailureCode    string    `json:"failure_code,omitempty"`
	FailureMessage string    `json:"failure_message,omitempty"`
	// A refund's: the caller's name of it (data.id is the sim's) and the
	// charge refunded. A dispute's: the charge disputed, why, and where it
	// stands (data.id is the dispute's).
	RefundID string `json:"refund_id,omitempty"`
	Charge   string `json:"charge_id,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Status   string `json:"status,omitempty"`
}

// VerifyWebhook checks the signature over the raw body before reading a
// byte of it, then returns the event it carries.
func VerifyWebhook(secret string, h http.Header, body []byte, now time.Time) (payment.Event, error) {
	key, err := secretKey(secret)
	if err != nil {
		return payment.Event{}, err
	}
	id, tsText := h.Get("webhook-id"), h.Get("webhook-timestamp")
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if id == "" || err != nil {
		return payment.Event{}, fmt.Errorf("%w: webhook-id or webhook-timestamp missing", ErrBadSignature)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > Tolerance || d < -Tolerance {
		return payment.Event{}, fmt.Errorf("%w: timestamp %s from now, outside %s", ErrBadSignature, d.Round(time.Second), Tolerance)
	}
	want := sign(key, id, ts, body)
	ok := false
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			ok = true
		}
	}
	if !ok {
		return payment.Event{}, fmt.Errorf("%w: no matching v1 signature", ErrBadSignature)
	}
	var b webhookBody
	if err := json.Unmarshal(body, &b); err != nil {
		return payment.Event{}, fmt.Errorf("sim: webhook body: %w", err)
	}
	ev := payment.Event{Provider: "sim", ID: id, Type: b.Type, Kind: payment.EventOther,
		PaymentID: b.Data.PaymentID, DownstreamKey: b.Data.IdempotencyKey}
	switch b.Type {
	case EventChargeSucceeded:
		ev.Kind = payment.EventSucceeded
		ev.Charge = payment.Charge{ID: b.Data.ChargeID, IdempotencyKey: b.Data.IdempotencyKey,
			Amount: b.Data.Amount, Currency: b.Data.Currency, CreatedAt: b.Data.CreatedAt}
	case EventChargeFailed:
		ev.Kind = payment.EventFailed
		ev.DeclineCode, ev.DeclineReason = b.Data.FailureCode, b.Data.FailureMessage
	case EventRefundSucceeded, EventRefundFailed:
		ev.Kind, ev.RefundID, ev.ProviderRefundID = payment.EventRefunded, b.Data.RefundID, b.Data.ChargeID
		if b.Type == EventRefundFailed {
			ev.Kind, ev.DeclineCode = payment.EventRefundFailure, b.Data.FailureCode
		}
	case EventDisputeCreated, EventDisputeClosed:
		ev.Kind = payment.EventDisputed
		ev.Dispute = &payment.Dispute{ID: b.Data.ChargeID, Status: b.Data.Status, Reason: b.Data.Reason, Amount: b.Data.Amount}
	}
	return ev, nil
}

// WebhookConfig is where the sim sends its events.
type WebhookConfig struct {
	URL    string // the receiver, e.g. oncepay's /v1/webhooks/sim
	Secret string // "whsec_..."
	// MaxAttempts bounds the deliveries of one event (default 8); the n-th
	// retry waits FirstRetry·2^(n-1) (default 250ms), at most MaxRetryWait.
	MaxAttempts  int
	FirstRetry   time.Duration
	MaxRetryWait time.Duration // default 30s
}

// outbox delivers events with retries, in goroutines that end with Close.
type outbox struct {
	cfg   WebhookConfig
	key   []byte
	hc    *http.Client
	stop  chan struct{}
	wg    sync.WaitGroup
	slots chan struct{} // bounds the posts in flight
	log   *slog.Logger

	inFlight atomic.Int64 // deliveries not yet ended

	mu        sync.Mutex
	delivered map[string]int // answered 2xx, by event id: for tests
	gaveUp    int
}

// SetWebhook starts sending events to cfg.URL. Call it once, before charges.
func (s *Sim) SetWebhook(cfg WebhookConfig) error {
	key, err := secretKey(cfg.Secret)
	if err != nil {
		return err
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 8
	}
	if cfg.FirstRetry <= 0 {
		cfg.FirstRetry = 250 * time.Millisecond
	}
	if cfg.MaxRetryWait <= 0 {
		cfg.MaxRetryWait = 30 * time.Second
	}
	o := &outbox{cfg: cfg, key: key, hc: &http.Client{Timeout: 10 * time.Second},
		stop: make(chan struct{}), slots: make(chan struct{}, 32), log: slog.Default(),
		delivered: map[string]int{}}
	if !s.outbox.CompareAndSwap(nil, o) {
		return errors.New("sim: webhooks already configured")
	}
	return nil
}

// WebhookStats is what the outbox did: 2xx answers by event id, and the
// events it gave up on after MaxAttempts.
func (s *Sim) WebhookStats() (delivered map[string]int, gaveUp int) {
	o := s.outbox.Load()
	if o == nil {
		return nil, 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	delivered = make(map[string]int, len(o.delivered))
	for k, v := range o.delivered {
		delivered[k] = v
	}
	return delivered, o.gaveUp
}

// WebhooksInFlight is how many events are still being delivered (waiting,
// posting or backing off): zero once every event was accepted or given up.
func (s *Sim) WebhooksInFlight() int {
	if o := s.outbox.Load(); o != nil {
		return int(o.inFlight.Load())
	}
	return 0
}

func (o *outbox) close() {
	close(o.stop)
	o.wg.Wait()
}

// emit queues an event about a charge, or a decline if d is set. A decline's
// id derives from the key: a retried charge that declines again is the same
// fact, as a provider replaying its idempotent answer sends nothing new.
func (s *Sim) emit(req payment.ChargeRequest, c payment.Charge, d *payment.DeclineError) {
	o := s.outbox.Load()
	if o == nil {
		return
	}
	b := webhookBody{Timestamp: time.Now().UTC(), Data: webhookData{IdempotencyKey: req.IdempotencyKey,
		PaymentID: req.PaymentID, Amount: req.Amount, Currency: req.Currency}}
	var id string
	if d != nil {
		sum := sha256.Sum256([]byte("charge.failed\x00" + req.IdempotencyKey))
		id = "msg_" + hex.EncodeToString(sum[:12])
		b.Type, b.Data.FailureCode, b.Data.FailureMessage = EventChargeFailed, d.Code, d.Message
	} else {
		id = "msg_" + strings.ToLower(crand.Text()[:24])
		b.Type, b.Data.ChargeID, b.Data.CreatedAt = EventChargeSucceeded, c.ID, c.CreatedAt
	}
	s.send(id, b)
}

// emitRefund queues an event of type typ about refund r: made, or failed
// with code. Each is a new fact, sent once.
func (s *Sim) emitRefund(typ string, r payment.ProviderRefund, refundID, paymentID, code string) {
	s.send("msg_"+strings.ToLower(crand.Text()[:24]), webhookBody{Type: typ, Timestamp: time.Now().UTC(), Data: webhookData{
		ChargeID: r.ID, IdempotencyKey: r.IdempotencyKey, PaymentID: paymentID, RefundID: refundID, Charge: r.ChargeID,
		Amount: r.Amount, Currency: r.Currency, CreatedAt: r.CreatedAt, FailureCode: code}})
}

// emitDispute queues an event of type typ about dispute d.
func (s *Sim) emitDispute(typ string, d payment.ProviderDispute) {
	s.send("msg_"+strings.ToLower(crand.Text()[:24]), webhookBody{Type: typ, Timestamp: time.Now().UTC(), Data: webhookData{
		ChargeID: d.ID, PaymentID: d.PaymentID, Charge: d.ChargeID, Amount: d.Amount, Currency: d.Currency,
		Reason: d.Reason, Status: d.Status}})
}

// send queues event id with body b, under the webhook knobs: delay,
// duplicates, reordering.
func (s *Sim) send(id string, b webhookBody) {
	o := s.outbox.Load()
	if o == nil {
		return
	}
	body, _ := json.Marshal(b) // fixed types always marshal
	f := s.Faults()
	delay := time.Duration(0)
	if f.WebhookDelay > 0 {
		delay = rand.N(f.WebhookDelay + 1)
	}
	if roll(f.WebhookReorder) { // held back, so events sent after it overtake it
		delay += reorderHold + rand.N(reorderHold)
	}
	copies := 1
	if roll(f.WebhookDuplicate) {
		copies = 2
	}
	o.wg.Add(1)
	o.inFlight.Add(1)
	go o.deliver(id, body, delay, copies)
}

// reorderHold is how long an event the reorder knob picks is held back.
const reorderHold = 300 * time.Millisecond

// deliver posts the event until a 2xx or MaxAttempts, waiting first delay
// and then a growing backoff; each attempt sends copies at once.
func (o *outbox) deliver(id string, body []byte, delay time.Duration, copies int) {
	defer o.wg.Done()
	defer o.inFlight.Add(-1)
	wait := o.cfg.FirstRetry
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(delay)
		select {
		case <-o.stop:
			t.Stop()
			return
		case <-t.C:
		}
		if o.post(id, body, copies) {
			return
		}
		if attempt >= o.cfg.MaxAttempts {
			o.mu.Lock()
			o.gaveUp++
			o.mu.Unlock()
			o.log.Warn("sim: webhook not accepted; giving up", "event_id", id, "attempts", attempt)
			return
		}
		delay, wait = wait, min(2*wait, o.cfg.MaxRetryWait)
	}
}

// post sends copies of one delivery at once and reports whether any was
// accepted.
func (o *outbox) post(id string, body []byte, copies int) bool {
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := false
	for range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case o.slots <- struct{}{}:
				defer func() { <-o.slots }()
			case <-o.stop:
				return
			}
			ok := o.postOnce(id, body)
			mu.Lock()
			accepted = accepted || ok
			mu.Unlock()
		}()
	}
	wg.Wait()
	return accepted
}

func (o *outbox) postOnce(id string, body []byte) bool {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-o.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return false
	}
	ts := time.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sign(o.key, id, ts, body))
	resp, err := o.hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	if ok {
		o.mu.Lock()
		o.delivered[id]++
		o.mu.Unlock()
	}
	return ok
}
