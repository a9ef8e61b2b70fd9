package payment

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits of a payment request, documented in README.md.
const (
	MaxBodyBytes        = 64 << 10
	MaxAmount           = 99_999_999 // minor units, as most card acquirers cap it
	MaxKeyLen           = 255
	MaxSourceLen        = 255
	MaxDescriptionLen   = 1000 // characters
	MaxMetadataKeys     = 50
	MaxMetadataKeyLen   = 40  // characters
	MaxMetadataValueLen = 500 // characters
	maxJSONDepth        = 8
)

// Request is a validated payment request.
type Request struct {
	Amount      int64             `json:"amount"`
	Currency    string            `json:"currency"`
	Source      string            `json:"source"`
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

// wireRequest is the body as sent; amount stays raw so that only a JSON
// integer literal is accepted (not "100", 100.0 or 1e2).
type wireRequest struct {
	Amount      json.RawMessage   `json:"amount"`
	Currency    string            `json:"currency"`
	Source      string            `json:"source"`
	Description string            `json:"description"`
	Metadata    map[string]string `json:"metadata"`
}

var requestFields = map[string]bool{
	"amount": true, "currency": true, "source": true, "description": true, "metadata": true,
}

// ParseRequest decodes and validates a payment request body. Any problem is
// an EINVALID error whose message names it; nothing else is returned.
func ParseRequest(body []byte) (Request, error) {
	if !utf8.Valid(body) {
		return Request{}, Errorf(EINVALID, "The body is not valid UTF-8.")
	}
	if err := checkJSON(body, requestFields); err != nil {
		return Request{}, err
	}
	var w wireRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Request{}, Errorf(EINVALID, "The body does not match the payment schema: %s.", jsonErrorDetail(err))
	}
	return w.validate()
}

func (w *wireRequest) validate() (Request, error) {
	r := Request{Currency: w.Currency, Source: w.Source, Description: w.Description, Metadata: w.Metadata}
	if len(w.Amount) == 0 || string(w.Amount) == "null" {
		return r, Errorf(EINVALID, "amount is required: an integer in minor units (cents).")
	}
	amount, err := strconv.ParseInt(string(w.Amount), 10, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange):
		return r, Errorf(EINVALID, "amount is too large: at most %d minor units.", MaxAmount)
	case err != nil:
		return r, Errorf(EINVALID, "amount must be an integer in minor units (cents), not %s.", truncate(string(w.Amount), 40))
	case amount <= 0:
		return r, Errorf(EINVALID, "amount must be positive.")
	case amount > MaxAmount:
		return r, Errorf(EINVALID, "amount is too large: at most %d minor units.", MaxAmount)
	}
	r.Amount = amount
	// Stripe and its clients write "usd", the standard "USD": both name the
	// same payment, so the canonical form (fingerprint, stored request,
	// response) is upper case. Only 3-byte (ASCII) input is folded, so no
	// Unicode case mapping can turn another string into a code.
	if len(r.Currency) == 3 {
		r.Currency = strings.ToUpper(r.Currency)
	}
	if !validCurrency(r.Currency) {
		return r, Errorf(EINVALID, "currency must be an ISO 4217 code, such as \"EUR\" or \"eur\".")
	}
	if r.Source == "" {
		return r, Errorf(EINVALID, "source is required: the payment method token, such as \"tok_visa\".")
	}
	if len(r.Source) > MaxSourceLen || !visibleASCII(r.Source) {
		return r, Errorf(EINVALID, "source must be 1-%d visible ASCII characters.", MaxSourceLen)
	}
	if utf8.RuneCountInString(r.Description) > MaxDescriptionLen || hasControl(r.Description) {
		return r, Errorf(EINVALID, "description must be at most %d characters, without control characters.", MaxDescriptionLen)
	}
	if len(r.Metadata) > MaxMetadataKeys {
		return r, Errorf(EINVALID, "metadata has at most %d keys.", MaxMetadataKeys)
	}
	for k, v := range r.Metadata {
		if k == "" || utf8.RuneCountInString(k) > MaxMetadataKeyLen || hasControl(k) {
			return r, Errorf(EINVALID, "metadata keys must be 1-%d characters, without control characters.", MaxMetadataKeyLen)
		}
		if utf8.RuneCountInString(v) > MaxMetadataValueLen || hasControl(v) {
			return r, Errorf(EINVALID, "metadata values must be at most %d characters, without control characters.", MaxMetadataValueLen)
		}
	}
	if len(r.Metadata) == 0 {
		r.Metadata = nil
	}
	return r, nil
}

// Canonical is the request's canonical JSON: fixed field order, sorted
// metadata keys, no insignificant whitespace, empty optionals omitted. Two
// bodies that mean the same payment have the same canonical form.
func (r Request) Canonical() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic("payment: marshal request: " + err.Error()) // strings and an int64 always marshal
	}
	return b
}

// Fingerprint is the SHA-256 of the canonical form: what a retry is compared by.
func (r Request) Fingerprint() []byte { return fingerprint(r.Canonical()) }

func fingerprint(canonical []byte) []byte {
	sum := sha256.Sum256(canonical)
	return sum[:]
}

// ValidKey reports whether k is a well-formed Idempotency-Key: 1-255 visible
// ASCII characters.
func ValidKey(k string) bool {
	return k != "" && len(k) <= MaxKeyLen && visibleASCII(k)
}

// checkJSON rejects what encoding/json would quietly accept: duplicate keys
// (which one wins is ambiguous), keys that differ from a field only in case,
// a body that is not one object, and trailing data.
func checkJSON(body []byte, fields map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return Errorf(EINVALID, "The body is not valid JSON.")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Errorf(EINVALID, "The body must be a JSON object.")
	}
	if err := checkObject(dec, 1, fields); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return Errorf(EINVALID, "The body has data after the JSON object.")
	}
	return nil
}

// checkObject walks the members of an object whose '{' was just read.
func checkObject(dec *json.Decoder, depth int, fields map[string]bool) error {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return Errorf(EINVALID, "The body is not valid JSON.")
		}
		key := tok.(string) // the decoder only yields strings in key position
		if seen[key] {
			return Errorf(EINVALID, "The field %q appears twice.", truncate(key, 40))
		}
		seen[key] = true
		if depth == 1 && !fields[key] {
			return Errorf(EINVALID, "Unknown field %q.", truncate(key, 40))
		}
		if err := checkValue(dec, depth); err != nil {
			return err
		}
	}
	return closeDelim(dec)
}

func checkValue(dec *json.Decoder, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return Errorf(EINVALID, "The body is not valid JSON.")
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth >= maxJSONDepth {
		return Errorf(EINVALID, "The body is nested too deeply.")
	}
	if d == '{' {
		return checkObject(dec, depth+1, nil)
	}
	for dec.More() { // '[': arrays are never valid here, but are walked so the error names the field
		if err := checkValue(dec, depth+1); err != nil {
			return err
		}
	}
	return closeDelim(dec)
}

func closeDelim(dec *json.Decoder) error {
	if _, err := dec.Token(); err != nil {
		return Errorf(EINVALID, "The body is not valid JSON.")
	}
	return nil
}

// jsonErrorDetail turns a decode error into a client-safe phrase.
func jsonErrorDetail(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field + " has the wrong type (" + te.Value + ")"
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	return truncate(msg, 120)
}

func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
