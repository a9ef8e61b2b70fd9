package payment

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits of a payment request, documented in docs/api.md.
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
	if w, ok := plainRequest(body); ok {
		return w.validate()
	}
	return decodeRequest(body)
}

// decodeRequest is ParseRequest the slow way, for any valid UTF-8 body: the
// token walk, which words what is wrong, then encoding/json. Whatever the
// fast path decodes, this decodes alike.
func decodeRequest(body []byte) (Request, error) {
	if err := walkJSON(body, requestFields); err != nil {
		return Request{}, err
	}
	var w wireRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		e := Errorf(EINVALID, "The body does not match the payment schema: %s.", jsonErrorDetail(err))
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			e.Param = te.Field
		}
		return Request{}, e
	}
	return w.validate()
}

func (w *wireRequest) validate() (Request, error) {
	r := Request{Currency: w.Currency, Source: w.Source, Description: w.Description, Metadata: w.Metadata}
	if len(w.Amount) == 0 {
		return r, Invalidf("amount", "amount is required: an integer in minor units (cents).")
	}
	amount, err := strconv.ParseInt(string(w.Amount), 10, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange):
		return r, Invalidf("amount", "amount is too large: at most %d minor units.", MaxAmount)
	case err != nil:
		return r, Invalidf("amount", "amount must be an integer in minor units (cents), not %s.", truncate(string(w.Amount), 40))
	case amount <= 0:
		return r, Invalidf("amount", "amount must be positive.")
	case amount > MaxAmount:
		return r, Invalidf("amount", "amount is too large: at most %d minor units.", MaxAmount)
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
		return r, Invalidf("currency", "currency must be an ISO 4217 code, such as \"EUR\" or \"eur\".")
	}
	if r.Source == "" {
		return r, Invalidf("source", "source is required: the payment method token, such as \"tok_visa\".")
	}
	if len(r.Source) > MaxSourceLen || !visibleASCII(r.Source) {
		return r, Invalidf("source", "source must be 1-%d visible ASCII characters.", MaxSourceLen)
	}
	if utf8.RuneCountInString(r.Description) > MaxDescriptionLen || hasControl(r.Description) {
		return r, Invalidf("description", "description must be at most %d characters, without control characters.", MaxDescriptionLen)
	}
	if len(r.Metadata) > MaxMetadataKeys {
		return r, Invalidf("metadata", "metadata has at most %d keys.", MaxMetadataKeys)
	}
	for k, v := range r.Metadata {
		if k == "" || utf8.RuneCountInString(k) > MaxMetadataKeyLen || hasControl(k) {
			return r, Invalidf("metadata", "metadata keys must be 1-%d characters, without control characters.", MaxMetadataKeyLen)
		}
		if utf8.RuneCountInString(v) > MaxMetadataValueLen || hasControl(v) {
			return r, Invalidf("metadata["+k+"]", "metadata values must be at most %d characters, without control characters.", MaxMetadataValueLen)
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
// a body that is not one object, trailing data, escapes of unpaired UTF-16
// surrogates (decoded as U+FFFD, so two different bodies would read alike),
// and null anywhere (decoded as the field left out: a refund's null amount
// would refund all that is left, a null metadata value would read as "").
func checkJSON(body []byte, fields map[string]bool) error {
	if plainJSON(body, fields) {
		return nil
	}
	return walkJSON(body, fields)
}

// walkJSON is checkJSON token by token, for any body: it says what is wrong.
func walkJSON(body []byte, fields map[string]bool) error {
	c := &jsonChecker{dec: json.NewDecoder(bytes.NewReader(body)), body: body, fields: fields}
	c.dec.UseNumber()
	tok, err := c.dec.Token()
	if err != nil {
		return Errorf(EINVALID, "The body is not valid JSON.")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Errorf(EINVALID, "The body must be a JSON object.")
	}
	if err := c.object("", 1); err != nil {
		return err
	}
	if _, err := c.dec.Token(); err != io.EOF {
		return Errorf(EINVALID, "The body has data after the JSON object.")
	}
	return nil
}

// jsonChecker walks a body token by token, seeing each token's raw bytes.
type jsonChecker struct {
	dec    *json.Decoder
	body   []byte
	fields map[string]bool // the fields the body may have
}

// token reads the next token and reports whether its raw bytes hold an
// unpaired surrogate escape, which the decoded token no longer shows.
func (c *jsonChecker) token() (tok json.Token, lone bool, err error) {
	start := c.dec.InputOffset()
	if tok, err = c.dec.Token(); err != nil {
		return nil, false, Errorf(EINVALID, "The body is not valid JSON.")
	}
	return tok, hasLoneSurrogate(c.body[start:c.dec.InputOffset()]), nil
}

// object walks the members of an object whose '{' was just read; field is
// the object's own param ("" for the body, "metadata").
func (c *jsonChecker) object(field string, depth int) error {
	seen := map[string]bool{}
	for c.dec.More() {
		tok, lone, err := c.token()
		if err != nil {
			return err
		}
		if lone {
			return Invalidf(field, "A field name has an unpaired UTF-16 surrogate escape (\\uD800-\\uDFFF): not a character.")
		}
		key := tok.(string) // the decoder only yields strings in key position
		if seen[key] {
			return Invalidf(param(field, key), "The field %q appears twice.", truncate(key, 40))
		}
		seen[key] = true
		if depth == 1 && !c.fields[key] {
			return Invalidf(truncate(key, 40), "Unknown field %q.", truncate(key, 40))
		}
		if err := c.value(param(field, key), depth); err != nil {
			return err
		}
	}
	return c.closeDelim()
}

func (c *jsonChecker) value(field string, depth int) error {
	tok, lone, err := c.token()
	if err != nil {
		return err
	}
	if lone {
		return Invalidf(field, "%s has an unpaired UTF-16 surrogate escape (\\uD800-\\uDFFF): not a character.", field)
	}
	if tok == nil {
		return Invalidf(field, "%s is null: give it a value, or leave it out where it is optional.", field)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth >= maxJSONDepth {
		return Invalidf(field, "The body is nested too deeply.")
	}
	if d == '{' {
		return c.object(field, depth+1)
	}
	for c.dec.More() { // '[': arrays are never valid here, but are walked so the error names the field
		if err := c.value(field, depth+1); err != nil {
			return err
		}
	}
	return c.closeDelim()
}

func (c *jsonChecker) closeDelim() error {
	if _, err := c.dec.Token(); err != nil {
		return Errorf(EINVALID, "The body is not valid JSON.")
	}
	return nil
}

// hasLoneSurrogate reports whether raw JSON holds a \uXXXX escape of a
// UTF-16 surrogate that is not the high half of a pair followed by its low
// half. Only escapes are looked at: a surrogate written as UTF-8 is already
// invalid UTF-8.
func hasLoneSurrogate(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++ // the escaped character: a backslash escaped is skipped whole
		r, ok := escapedUnit(raw, i)
		if !ok {
			continue
		}
		i += 4
		switch {
		case utf16.IsSurrogate(r) && r < 0xdc00: // high: its low half must follow
			// escapedUnit's ok means raw reaches past i+1: no bounds check needed.
			if lo, ok := escapedUnit(raw, i+2); ok && raw[i+1] == '\\' && lo >= 0xdc00 && lo <= 0xdfff {
				i += 6
				continue
			}
			return true
		case utf16.IsSurrogate(r): // a low half with no high half before it
			return true
		}
	}
	return false
}

// escapedUnit is the UTF-16 unit of the escape "uXXXX" at raw[i:], if it is one.
func escapedUnit(raw []byte, i int) (rune, bool) {
	if i+5 > len(raw) || raw[i] != 'u' {
		return 0, false
	}
	n, err := strconv.ParseUint(string(raw[i+1:i+5]), 16, 16)
	return rune(n), err == nil
}

// param names key of the object field as Stripe does: "metadata[order_id]".
func param(field, key string) string {
	key = truncate(key, MaxMetadataKeyLen)
	if field == "" {
		return key
	}
	return field + "[" + key + "]"
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

// hasControl reports a C0 or C1 control character (U+0000-U+001F,
// U+007F-U+009F): U+009B, say, starts a terminal escape sequence.
func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
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
