package payment

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"
)

// The fast path only ever says yes to what the token walk accepts.
func FuzzPlainJSON(f *testing.F) {
	for _, s := range []string{
		`{"amount":1000,"currency":"EUR","source":"tok_visa"}`,
		` { "amount" : -0 , "metadata" : { "a" : "b" , "c" : null } } `,
		`{"amount":1000,"amount":1}`,
		`{"metadata":{"a":"1","a":"2"}}`,
		`{"Amount":1}`,
		`{"amount":01}`,
		`{"amount":1.5e3}`,
		`{"description":"a\"b"}`,
		`{"metadata":{"a":{"b":1}}}`,
		`{"amount":tru}`,
		`{"amount":1}{}`,
		`{"amount":1,}`,
		`{,}`,
		"{\"source\":\"a\x01\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) { // checked before, by both callers
			return
		}
		for _, fields := range []map[string]bool{requestFields, refundFields} {
			if !plainJSON(body, fields) {
				continue
			}
			if err := walkJSON(body, fields); err != nil {
				t.Fatalf("plainJSON accepts %q, the token walk does not: %v", body, err)
			}
		}
	})
}

// Bodies as clients send them take the fast path, so a change that sends
// them down the token walk again is seen.
func TestPlainBodiesTakeTheFastPath(t *testing.T) {
	for _, body := range []string{
		`{"amount":1000,"currency":"EUR","source":"tok_visa"}`,
		`{"amount": 1050, "currency": "usd", "source": "tok_visa", "description": "Order 42", "metadata": {"order_id": "42", "gift": "true"}}`,
		"{\n  \"amount\": 1,\n  \"currency\": \"JPY\",\n  \"source\": \"pm_card_visa\"\n}\n",
	} {
		if !plainJSON([]byte(body), requestFields) {
			t.Errorf("plainJSON(%s) = false", body)
		}
	}
	if _, ok := plainRequest([]byte(`{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":{"order":"42"}}`)); !ok {
		t.Error("a payment body is decoded the slow way")
	}
	if !plainJSON([]byte(`{"amount":500,"reason":"requested_by_customer"}`), refundFields) {
		t.Error("a refund body took the slow path")
	}
}

// The one-pass decode of a plain body is encoding/json's decode of it, or
// declines.
func FuzzPlainRequest(f *testing.F) {
	for _, s := range []string{
		`{"amount":1000,"currency":"EUR","source":"tok_visa"}`,
		`{"amount":null,"currency":null,"source":"x","description":"d","metadata":{}}`,
		`{"amount":"1","currency":1,"metadata":{"a":"1","b":"2"}}`,
		`{"metadata":null,"description":true}`,
		`{"metadata":{"a":null}}`,
		`{"metadata":{"a":1}}`,
		`{"metadata":"x"}`,
		`{"amount":{},"source":{}}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) {
			return
		}
		fast, ok := plainRequest(body)
		if !ok {
			return
		}
		var slow wireRequest
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&slow); err != nil {
			t.Fatalf("plainRequest decodes %q, encoding/json refuses it: %v", body, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("plainRequest(%q) = %+v, encoding/json %+v", body, fast, slow)
		}
	})
}

// A body with a null anywhere is never accepted, as a payment or as a
// refund; and the two ways of reading a body (the fast path where it
// applies, and the token walk with encoding/json) give the same request or
// the same problem for every body.
func FuzzParseBothWays(f *testing.F) {
	for _, s := range []string{
		`{"amount":1000,"currency":"EUR","source":"tok_visa","description":"d","metadata":{"a":"b"}}`,
		`{"amount":null,"currency":"EUR","source":"tok_visa"}`,
		`{"amount":1000,"currency":null,"source":"tok_visa"}`,
		`{"amount":1000,"currency":"EUR","source":null}`,
		`{"amount":1000,"currency":"EUR","source":"tok_visa","description":null}`,
		`{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":null}`,
		`{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":{"a":null}}`,
		`{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":{"a":"","b":null}}`,
		`{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":{"a":[null]}}`,
		`{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":{"a":{"b":null}}}`,
		`{"description":"caf\u00e9","metadata":{"a":null},"amount":1,"currency":"usd","source":"x"}`,
		` { "amount" : null } `,
		`{"amount":null}`,
		`{"amount":null,"reason":"duplicate"}`,
		`{"amount":100,"reason":null}`,
		`{"reason":"requested_by_customer"}`,
		`{}`,
		`null`,
		`[null]`,
		`{"amount":1}null`,
		`{"amount":"null"}`,
		`{"nul":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) { // refused first, by both
			return
		}
		null := hasNull(body)
		got, err := ParseRequest(body)
		slow, slowErr := decodeRequest(body)
		if null && err == nil {
			t.Fatalf("ParseRequest(%q) accepts a null: %+v", body, got)
		}
		if ProblemOf(err) != ProblemOf(slowErr) || (err == nil && !reflect.DeepEqual(got, slow)) {
			t.Fatalf("ParseRequest(%q) = %+v, %v; the slow way %+v, %v", body, got, err, slow, slowErr)
		}
		refund, err := ParseRefundRequest("pay_1", body)
		walked, walkErr := parseRefundRequest("pay_1", body, walkJSON)
		if null && err == nil {
			t.Fatalf("ParseRefundRequest(%q) accepts a null: %+v", body, refund)
		}
		if ProblemOf(err) != ProblemOf(walkErr) || refund != walked {
			t.Fatalf("ParseRefundRequest(%q) = %+v, %v; the slow way %+v, %v", body, refund, err, walked, walkErr)
		}
	})
}

// hasNull reports whether body holds a null token (not a "null" string)
// before the first thing that is not JSON.
func hasNull(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if tok == nil {
			return true
		}
	}
}
