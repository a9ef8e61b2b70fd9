package client

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"maps"
)

// PaymentRequest is what a payment charges. The server's rules: amount in
// minor units, 1 to 99,999,999; currency an ISO 4217 code in upper case;
// source 1-255 visible ASCII characters; description at most 1,000
// characters; metadata at most 50 keys.
type PaymentRequest struct {
	Amount      int64             `json:"amount"`
	Currency    string            `json:"currency"`
	Source      string            `json:"source"`
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

// Intent is one payment a customer means to make once: this cart, this
// amount. It holds the Idempotency-Key that names it, made when the intent
// is, and the request body, both fixed for the intent's life. Every attempt
// to pay it, by any number of Pay calls, sends the same key and the same
// bytes, so the server can tell a retry from a new payment. A new payment,
// even for the same amount, is a new Intent.
type Intent struct {
	key  string
	req  PaymentRequest
	body []byte
}

// NewIntent makes the intent to pay req, with a fresh random key. Call it
// when the checkout opens, not when the customer taps "Pay" (a second tap is
// the same intent), and keep Key with the checkout.
func NewIntent(req PaymentRequest) *Intent {
	return ResumeIntent(newKey(), req)
}

// ResumeIntent is the intent a key made earlier names, as a process that
// restarted while a payment was in flight finds it in the checkout's record.
// req must be the request first sent with key: another one is a different
// payment, which the server refuses with 409 idempotency-key-reused.
func ResumeIntent(key string, req PaymentRequest) *Intent {
	req.Metadata = maps.Clone(req.Metadata) // the caller's map must not change the intent
	body, _ := json.Marshal(req)            // cannot fail: strings, an integer and a string map
	return &Intent{key: key, req: req, body: body}
}

// Key is the intent's Idempotency-Key.
func (i *Intent) Key() string { return i.key }

// Request is what the intent pays.
func (i *Intent) Request() PaymentRequest {
	r := i.req
	r.Metadata = maps.Clone(r.Metadata)
	return r
}

// newKey returns a random UUIDv4: 122 random bits, so two intents never
// share a key by chance, in the form every log and database knows.
func newKey() string {
	var u [16]byte
	rand.Read(u[:])         // never fails, by crypto/rand's contract
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// RefundRequest is what a refund gives back. Amount in minor units, 0 for
// all that is left of the payment; Reason empty or one of "duplicate",
// "fraudulent", "requested_by_customer".
type RefundRequest struct {
	Amount int64  `json:"amount,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// RefundIntent is one refund a merchant means to make once, of one
// payment: like Intent, it holds its Idempotency-Key, made when the intent
// is, and the request body, both fixed for its life. A second refund of the
// same payment, even for the same amount, is a new RefundIntent.
type RefundIntent struct {
	key, paymentID string
	req            RefundRequest
	body           []byte
}

// NewRefundIntent makes the intent to refund req of the payment paymentID,
// with a fresh random key. Call it when the refund is decided (the support
// ticket, the return), not per click, and keep Key with that record.
func NewRefundIntent(paymentID string, req RefundRequest) *RefundIntent {
	return ResumeRefundIntent(newKey(), paymentID, req)
}

// ResumeRefundIntent is the refund intent a key made earlier names. The
// payment and req must be the ones first sent with key: others are a
// different refund, which the server refuses with 409 idempotency-key-reused.
func ResumeRefundIntent(key, paymentID string, req RefundRequest) *RefundIntent {
	body, _ := json.Marshal(req) // cannot fail: an integer and a string
	return &RefundIntent{key: key, paymentID: paymentID, req: req, body: body}
}

// Key is the refund intent's Idempotency-Key.
func (i *RefundIntent) Key() string { return i.key }

// PaymentID is the payment the intent refunds.
func (i *RefundIntent) PaymentID() string { return i.paymentID }

// Request is what the intent refunds.
func (i *RefundIntent) Request() RefundRequest { return i.req }
