package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of a delivery to a merchant's endpoint, as Standard Webhooks
// names them.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// DefaultEventTolerance is how far a delivery's webhook-timestamp may be
// from now, either way, as the Standard Webhooks libraries allow.
const DefaultEventTolerance = 5 * time.Minute

// ErrEventNotVerified is what every failed verification wraps: the
// delivery is not oncepay's, was changed, or is too old (a replay) or
// from a clock far off. Answer it 4xx and do not act on it.
var ErrEventNotVerified = errors.New("client: the event did not verify")

// EventVerifier checks the deliveries oncepay sends a merchant's endpoint,
// signed as Standard Webhooks specifies: webhook-signature holds one or
// more "v1,<base64 HMAC-SHA256>" of "webhook-id.webhook-timestamp.body",
// keyed by the base64-decoded bytes of the endpoint's whsec_ secret.
type EventVerifier struct {
	// Secrets are the endpoint's signing secrets, "whsec_..." as
	// "oncepay endpoint add" printed them: one, or during a rotation the
	// new one and the old.
	Secrets []string
	// Tolerance is how far webhook-timestamp may be from Now either way;
	// 0: DefaultEventTolerance.
	Tolerance time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// VerifyEvent verifies a delivery signed with secret, as EventVerifier
// does, and returns its event.
//
//	ev, err := client.VerifyEvent(os.Getenv("ONCEPAY_WEBHOOK_SECRET"), r.Header, body)
//	if err != nil { http.Error(w, "bad signature", http.StatusUnauthorized); return }
//	// In one transaction of your own: skip ev.ID if recorded, else apply it and record it.
func VerifyEvent(secret string, header http.Header, body []byte) (*Event, error) {
	return EventVerifier{Secrets: []string{secret}}.Verify(header, body)
}

// Verify checks header and body, the raw bytes of the request, before
// anything reads them: the webhook-timestamp within Tolerance of now, one
// of the webhook-signatures made with one of the Secrets. Then it decodes
// the event, whose id must be the webhook-id: dedupe by it.
func (v EventVerifier) Verify(header http.Header, body []byte) (*Event, error) {
	id, ts, sigs := header.Get(HeaderWebhookID), header.Get(HeaderWebhookTimestamp), header.Get(HeaderWebhookSignature)
	if id == "" || ts == "" || sigs == "" {
		return nil, fmt.Errorf("%w: a webhook-id, webhook-timestamp or webhook-signature header is missing", ErrEventNotVerified)
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: webhook-timestamp %q is not Unix seconds", ErrEventNotVerified, ts)
	}
	now, tolerance := time.Now, v.Tolerance
	if v.Now != nil {
		now = v.Now
	}
	if tolerance <= 0 {
		tolerance = DefaultEventTolerance
	}
	if off := now().Sub(time.Unix(secs, 0)); off > tolerance || off < -tolerance {
		return nil, fmt.Errorf("%w: signed %s from now, more than %s", ErrEventNotVerified, off.Round(time.Second), tolerance)
	}
	if !v.signed(id, strconv.FormatInt(secs, 10), sigs, body) {
		return nil, fmt.Errorf("%w: no signature matches the endpoint's secret", ErrEventNotVerified)
	}
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, fmt.Errorf("client: a verified event does not decode: %w", err)
	}
	if ev.ID != id {
		return nil, fmt.Errorf("%w: the event is %q, its webhook-id %q", ErrEventNotVerified, ev.ID, id)
	}
	return &ev, nil
}

// signed reports whether one of the v1 signatures in sigs is the HMAC of
// id.ts.body under one of v's secrets; read as the reference library
// reads them, so both accept the same deliveries.
func (v EventVerifier) signed(id, ts, sigs string, body []byte) bool {
	for _, secret := range v.Secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if err != nil || len(key) == 0 {
			continue
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		want := []byte(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
		for _, sig := range strings.Split(sigs, " ") {
			parts := strings.Split(sig, ",")
			if len(parts) >= 2 && parts[0] == "v1" && hmac.Equal([]byte(parts[1]), want) {
				return true
			}
		}
	}
	return false
}
