package payment_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/oncepay/oncepay/payment"
)

// Every limit the request parser enforces, at the limit (accepted) and one
// past it (refused): an off-by-one in either direction fails here.
func TestRequestLimitBoundaries(t *testing.T) {
	body := func(amount int64, source, description string, metadata map[string]string) string {
		b := fmt.Sprintf(`{"amount":%d,"currency":"EUR","source":%q,"description":%q`, amount, source, description)
		if metadata != nil {
			var kv []string
			for k, v := range metadata {
				kv = append(kv, fmt.Sprintf("%q:%q", k, v))
			}
			b += `,"metadata":{` + strings.Join(kv, ",") + `}`
		}
		return b + "}"
	}
	keys := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("k%d", i)] = "v"
		}
		return m
	}
	// Characters, not bytes: é is two bytes in UTF-8.
	chars := func(n int) string { return strings.Repeat("é", n) }
	nested := func(depth int) string {
		return `{"amount":100,"currency":"EUR","source":"tok_visa","metadata":` +
			strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`
	}
	tests := []struct {
		name      string
		at, past  string
		pastError string // what the refusal names
	}{
		{"amount", body(payment.MaxAmount, "tok_visa", "", nil), body(payment.MaxAmount+1, "tok_visa", "", nil), "too large"},
		{"amount, low end", body(1, "tok_visa", "", nil), body(0, "tok_visa", "", nil), "positive"},
		{"source length", body(100, strings.Repeat("s", payment.MaxSourceLen), "", nil), body(100, strings.Repeat("s", payment.MaxSourceLen+1), "", nil), "source"},
		{"description length", body(100, "tok_visa", chars(payment.MaxDescriptionLen), nil), body(100, "tok_visa", chars(payment.MaxDescriptionLen+1), nil), "description"},
		{"metadata keys", body(100, "tok_visa", "", keys(payment.MaxMetadataKeys)), body(100, "tok_visa", "", keys(payment.MaxMetadataKeys+1)), "metadata"},
		{"metadata key length", body(100, "tok_visa", "", map[string]string{chars(payment.MaxMetadataKeyLen): "v"}),
			body(100, "tok_visa", "", map[string]string{chars(payment.MaxMetadataKeyLen + 1): "v"}), "metadata keys"},
		{"metadata value length", body(100, "tok_visa", "", map[string]string{"k": chars(payment.MaxMetadataValueLen)}),
			body(100, "tok_visa", "", map[string]string{"k": chars(payment.MaxMetadataValueLen + 1)}), "metadata values"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := payment.ParseRequest([]byte(tt.at)); err != nil {
				t.Errorf("at the limit: %v, want it accepted", err)
			}
			_, err := payment.ParseRequest([]byte(tt.past))
			if payment.ErrorCode(err) != payment.EINVALID || !strings.Contains(payment.ErrorMessage(err), tt.pastError) {
				t.Errorf("one past the limit: %v, want an invalid request naming %q", err, tt.pastError)
			}
		})
	}

	// Nesting: the body is depth 1, so a value may open 7 more levels. At
	// the limit the refusal is the schema's (metadata is no array), one past
	// it the depth's.
	const tooDeep = "nested too deeply"
	if _, err := payment.ParseRequest([]byte(nested(7))); err == nil || strings.Contains(payment.ErrorMessage(err), tooDeep) {
		t.Errorf("nesting at the limit: %v, want a schema error, not %q", err, tooDeep)
	}
	if _, err := payment.ParseRequest([]byte(nested(8))); !strings.Contains(payment.ErrorMessage(err), tooDeep) {
		t.Errorf("nesting one past the limit: %v, want %q", err, tooDeep)
	}
	// Objects count as arrays do.
	objects := func(depth int) string {
		return `{"amount":100,"currency":"EUR","source":"tok_visa","metadata":` +
			strings.Repeat(`{"k":`, depth) + "1" + strings.Repeat("}", depth) + `}`
	}
	if _, err := payment.ParseRequest([]byte(objects(7))); err == nil || strings.Contains(payment.ErrorMessage(err), tooDeep) {
		t.Errorf("objects nested at the limit: %v, want a schema error, not %q", err, tooDeep)
	}
	if _, err := payment.ParseRequest([]byte(objects(8))); !strings.Contains(payment.ErrorMessage(err), tooDeep) {
		t.Errorf("objects nested one past the limit: %v, want %q", err, tooDeep)
	}

	// Text fields: every printable ASCII character passes, from the space
	// to the tilde; the C0 controls and DEL do not.
	printable := make([]byte, 0, 0x7f-0x20)
	for c := byte(0x20); c < 0x7f; c++ {
		printable = append(printable, c)
	}
	for _, field := range []string{"description", "metadata"} {
		withText := func(text string) string {
			v, _ := json.Marshal(text)
			if field == "metadata" {
				return `{"amount":100,"currency":"EUR","source":"tok_visa","metadata":{"k":` + string(v) + `}}`
			}
			return `{"amount":100,"currency":"EUR","source":"tok_visa","description":` + string(v) + `}`
		}
		if _, err := payment.ParseRequest([]byte(withText(string(printable)))); err != nil {
			t.Errorf("%s of every printable ASCII character: %v, want it accepted", field, err)
		}
		for _, c := range []string{"\x00", "\x1f", "\x7f"} {
			if _, err := payment.ParseRequest([]byte(withText("a" + c))); payment.ErrorCode(err) != payment.EINVALID {
				t.Errorf("%s with %q: %v, want it refused", field, c, err)
			}
		}
	}

	// An error that quotes what it refused quotes 40 bytes at the most.
	raw := func(n int) string { return `"` + strings.Repeat("x", n-2) + `"` } // a JSON string of n bytes
	if _, err := payment.ParseRequest([]byte(`{"amount":` + raw(40) + `,"currency":"EUR","source":"tok_visa"}`)); !strings.Contains(payment.ErrorMessage(err), "not "+raw(40)+".") {
		t.Errorf("a 40-byte amount quoted: %v, want it whole", err)
	}
	if _, err := payment.ParseRequest([]byte(`{"amount":` + raw(41) + `,"currency":"EUR","source":"tok_visa"}`)); !strings.Contains(payment.ErrorMessage(err), raw(41)[:40]+"...") {
		t.Errorf("a 41-byte amount quoted: %v, want its first 40 bytes and ...", err)
	}

	// The Idempotency-Key: 1 to MaxKeyLen visible ASCII characters.
	for _, tt := range []struct {
		key  string
		want bool
	}{
		{strings.Repeat("k", payment.MaxKeyLen), true},
		{strings.Repeat("k", payment.MaxKeyLen+1), false},
		{"k", true},
		{"", false},
		{"!~", true},   // the first and last visible ASCII characters
		{"a b", false}, // space is not visible
		{"a\x7f", false},
	} {
		if got := payment.ValidKey(tt.key); got != tt.want {
			t.Errorf("ValidKey(%.20q, %d bytes) = %v, want %v", tt.key, len(tt.key), got, tt.want)
		}
	}
}

// Escaped surrogates: a pair is one character, at either end of the low
// half's range; a high half followed by anything else, or a low half alone,
// is refused. The low half's range is checked at its edges.
func TestEscapedSurrogateEdges(t *testing.T) {
	for _, tt := range []struct {
		escaped string
		ok      bool
	}{
		{`\ud800\udc00`, true},   // U+10000, the first pair
		{`\udbff\udfff`, true},   // U+10FFFF, the last
		{`\ud83d\ude00`, true},   // an emoji
		{`a\ud83d\ude00b`, true}, // a pair between plain characters
		{`\ud83d\udbff`, false},  // a high half followed by another high half
		{`\ud83d\ue000`, false},  // a high half followed by no surrogate
		{`\ud83dx\ude00`, false}, // the halves apart
		{`\ud83d`, false},
		{`\ude00`, false},
		{`\\ud83d`, true}, // an escaped backslash, then text
		{`\ue000`, true},  // past the surrogates
	} {
		body := `{"amount":100,"currency":"EUR","source":"tok_visa","description":"` + tt.escaped + `"}`
		_, err := payment.ParseRequest([]byte(body))
		if (err == nil) != tt.ok {
			t.Errorf("description %s: %v, want ok %v", tt.escaped, err, tt.ok)
		}
	}
}

// A quote cut at 40 bytes never splits a character: it ends before one
// that would not fit whole.
func TestQuoteCutsBetweenCharacters(t *testing.T) {
	raw := `"` + strings.Repeat("é", 30) + `"` // 62 bytes; byte 40 is inside the 20th é
	_, err := payment.ParseRequest([]byte(`{"amount":` + raw + `,"currency":"EUR","source":"tok_visa"}`))
	msg := payment.ErrorMessage(err)
	if !utf8.ValidString(msg) || !strings.Contains(msg, `"`+strings.Repeat("é", 19)+"...") {
		t.Errorf("message = %q, want the first 19 é whole, then ...", msg)
	}
}
