package payment_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/payment"
)

func TestParseRequestValid(t *testing.T) {
	got, err := payment.ParseRequest([]byte(`{"source":"tok_visa","metadata":{"b":"2","a":"1"},"currency":"EUR","amount":1050,"description":"Order 42"}`))
	if err != nil {
		t.Fatalf("ParseRequest: %v", err)
	}
	want := `{"amount":1050,"currency":"EUR","source":"tok_visa","description":"Order 42","metadata":{"a":"1","b":"2"}}`
	if string(got.Canonical()) != want {
		t.Errorf("Canonical() = %s, want %s", got.Canonical(), want)
	}
}

func TestParseRequestInvalid(t *testing.T) {
	tests := []struct {
		name, body string
	}{
		{"empty body", ``},
		{"malformed JSON", `{"amount":1000,`},
		{"array", `[1,2]`},
		{"trailing data", `{"amount":1000,"currency":"EUR","source":"tok_visa"} {}`},
		{"duplicate key", `{"amount":1000,"amount":1,"currency":"EUR","source":"tok_visa"}`},
		{"duplicate metadata key", `{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":{"a":"1","a":"2"}}`},
		{"field differing in case", `{"Amount":1000,"currency":"EUR","source":"tok_visa"}`},
		{"amount as string", `{"amount":"1000","currency":"EUR","source":"tok_visa"}`},
		{"amount as float", `{"amount":10.5,"currency":"EUR","source":"tok_visa"}`},
		{"amount in exponent form", `{"amount":1e3,"currency":"EUR","source":"tok_visa"}`},
		{"amount zero", `{"amount":0,"currency":"EUR","source":"tok_visa"}`},
		{"amount negative", `{"amount":-5,"currency":"EUR","source":"tok_visa"}`},
		{"amount overflows int64", `{"amount":99999999999999999999,"currency":"EUR","source":"tok_visa"}`},
		{"amount over maximum", `{"amount":100000000,"currency":"EUR","source":"tok_visa"}`},
		{"amount missing", `{"currency":"EUR","source":"tok_visa"}`},
		{"amount null", `{"amount":null,"currency":"EUR","source":"tok_visa"}`},
		{"currency not ASCII", `{"amount":1000,"currency":"uſd","source":"tok_visa"}`},
		{"currency unknown", `{"amount":1000,"currency":"XYZ","source":"tok_visa"}`},
		{"currency too long", `{"amount":1000,"currency":"EURO","source":"tok_visa"}`},
		{"currency number", `{"amount":1000,"currency":978,"source":"tok_visa"}`},
		{"source missing", `{"amount":1000,"currency":"EUR"}`},
		{"source with space", `{"amount":1000,"currency":"EUR","source":"tok visa"}`},
		{"unknown field", `{"amount":1000,"currency":"EUR","source":"tok_visa","capture":true}`},
		{"nested metadata", `{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":{"a":{"b":"c"}}}`},
		{"metadata number", `{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":{"a":1}}`},
		{"metadata array", `{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":["a"]}`},
		{"too many metadata keys", `{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":{` + manyKeys(51) + `}}`},
		{"description too long", `{"amount":1000,"currency":"EUR","source":"tok_visa","description":"` + strings.Repeat("x", 1001) + `"}`},
		{"description with control character", `{"amount":1000,"currency":"EUR","source":"tok_visa","description":"a\u0000b"}`},
		{"invalid UTF-8", "{\"amount\":1000,\"currency\":\"EUR\",\"source\":\"tok_visa\",\"description\":\"\xff\xfe\"}"},
		{"deep nesting", `{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":{"a":[[[[[[[[[[1]]]]]]]]]]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := payment.ParseRequest([]byte(tt.body))
			if got := payment.ErrorCode(err); got != payment.EINVALID {
				t.Errorf("ParseRequest(%.60q) code = %q (err %v), want %q", tt.body, got, err, payment.EINVALID)
			}
		})
	}
}

func manyKeys(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `":"v"`)
	}
	return b.String()
}

func TestValidKey(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{"0b0e4a4e-2c38-4b1c-9d0e-6c1f6f1c2a11", true},
		{"a", true},
		{strings.Repeat("k", 255), true},
		{"", false},
		{strings.Repeat("k", 256), false},
		{"has space", false},
		{"tab\tkey", false},
		{"nul\x00", false},
		{"ünïcode", false},
	}
	for _, tt := range tests {
		if got := payment.ValidKey(tt.key); got != tt.want {
			t.Errorf("ValidKey(%.20q) = %v, want %v", tt.key, got, tt.want)
		}
	}
}

func TestFingerprintEqualForEqualMeaning(t *testing.T) {
	a := mustParse(t, `{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":{"x":"1","y":"2"}}`)
	b := mustParse(t, "{ \"metadata\" : {\"y\":\"2\",\"x\":\"1\"},\n\t\"source\":\"tok_visa\", \"currency\":\"EUR\",\"amount\":1000 }")
	c := mustParse(t, `{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":{"x":"1","y":"3"}}`)
	d := mustParse(t, `{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":{"x":"1","y":"2"},"description":""}`)
	if !bytes.Equal(a.Fingerprint(), b.Fingerprint()) {
		t.Errorf("reordered, re-spaced body: fingerprints differ")
	}
	if !bytes.Equal(a.Fingerprint(), d.Fingerprint()) {
		t.Errorf("empty description vs absent: fingerprints differ")
	}
	if bytes.Equal(a.Fingerprint(), c.Fingerprint()) {
		t.Errorf("different metadata value: fingerprints equal")
	}
}

// "usd" is how Stripe and its clients write "USD": the same payment, with
// one canonical form in the fingerprint, the stored request and the response.
func TestCurrencyCaseIsOnePayment(t *testing.T) {
	upper := mustParse(t, `{"amount":1000,"currency":"USD","source":"tok_visa"}`)
	for _, c := range []string{"usd", "Usd"} {
		got := mustParse(t, `{"amount":1000,"currency":"`+c+`","source":"tok_visa"}`)
		if got.Currency != "USD" {
			t.Errorf("currency %q: Currency = %q, want USD", c, got.Currency)
		}
		if !bytes.Equal(got.Fingerprint(), upper.Fingerprint()) {
			t.Errorf("currency %q: fingerprint differs from USD's", c)
		}
		if string(got.Canonical()) != string(upper.Canonical()) {
			t.Errorf("currency %q: Canonical() = %s, want %s", c, got.Canonical(), upper.Canonical())
		}
	}
}

func mustParse(t testing.TB, body string) payment.Request {
	t.Helper()
	r, err := payment.ParseRequest([]byte(body))
	if err != nil {
		t.Fatalf("ParseRequest(%s): %v", body, err)
	}
	return r
}

// FuzzParseRequest checks that decoding never panics, that whatever parses
// round-trips through its canonical form to the same fingerprint (so field
// order and whitespace never matter), and that a semantic change always
// changes the fingerprint.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"amount":1000,"currency":"EUR","source":"tok_visa"}`))
	f.Add([]byte(`{"amount":1,"currency":"JPY","source":"tok_amex","description":"d","metadata":{"a":"b"}}`))
	f.Add([]byte(`{"metadata":{"z":"","a":"\u00e9"},"amount":99999999,"source":"x","currency":"USD"}`))
	f.Add([]byte(`{"amount":1e3}`))
	f.Add([]byte(`{"a":[{"b":[1,{"c":null}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := payment.ParseRequest(body)
		if err != nil {
			if payment.ErrorCode(err) != payment.EINVALID {
				t.Fatalf("ParseRequest error code = %q, want %q", payment.ErrorCode(err), payment.EINVALID)
			}
			return
		}
		canon := r.Canonical()
		again, err := payment.ParseRequest(canon)
		if err != nil {
			t.Fatalf("canonical form %s does not parse: %v", canon, err)
		}
		if !bytes.Equal(r.Fingerprint(), again.Fingerprint()) {
			t.Fatalf("fingerprint changed through the canonical form %s", canon)
		}
		// The same request re-serialised with fields reversed and indented.
		var m map[string]any
		if err := json.Unmarshal(canon, &m); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		buf.WriteString("{\n")
		keys := []string{"metadata", "description", "source", "currency", "amount"}
		first := true
		for _, k := range keys {
			v, ok := m[k]
			if !ok {
				continue
			}
			if !first {
				buf.WriteString(",\n")
			}
			first = false
			kb, _ := json.Marshal(k)
			vb, _ := json.MarshalIndent(v, "  ", "   ")
			buf.Write(kb)
			buf.WriteString(" : ")
			buf.Write(vb)
		}
		buf.WriteString("\n}")
		shuffled, err := payment.ParseRequest(buf.Bytes())
		if err != nil {
			t.Fatalf("reordered form %s does not parse: %v", buf.Bytes(), err)
		}
		if !bytes.Equal(r.Fingerprint(), shuffled.Fingerprint()) {
			t.Fatalf("reordered form %s: fingerprint differs", buf.Bytes())
		}
		changed := r
		changed.Amount = r.Amount%payment.MaxAmount + 1
		if bytes.Equal(r.Fingerprint(), changed.Fingerprint()) {
			t.Fatalf("amount %d -> %d: fingerprint unchanged", r.Amount, changed.Amount)
		}
	})
}

// An invalid request names the field at fault, as Stripe's param does;
// a body that is not a payment at all names none.
func TestParseRequestParam(t *testing.T) {
	const ok = `"amount":1000,"currency":"EUR","source":"tok_visa"`
	for _, tt := range []struct {
		name, body, param string
	}{
		{"malformed JSON", `{"amount":1000,`, ""},
		{"invalid UTF-8", "{" + ok + ",\"description\":\"\xff\"}", ""},
		{"amount missing", `{"currency":"EUR","source":"tok_visa"}`, "amount"},
		{"amount as string", `{"amount":"1000","currency":"EUR","source":"tok_visa"}`, "amount"},
		{"amount over maximum", `{"amount":100000000,"currency":"EUR","source":"tok_visa"}`, "amount"},
		{"currency unknown", `{"amount":1000,"currency":"XYZ","source":"tok_visa"}`, "currency"},
		{"source missing", `{"amount":1000,"currency":"EUR"}`, "source"},
		{"description too long", "{" + ok + `,"description":"` + strings.Repeat("x", 1001) + `"}`, "description"},
		{"description a number", "{" + ok + `,"description":5}`, "description"},
		{"too many metadata keys", "{" + ok + `,"metadata":{` + manyKeys(51) + `}}`, "metadata"},
		{"metadata value too long", "{" + ok + `,"metadata":{"order":"` + strings.Repeat("v", 501) + `"}}`, "metadata[order]"},
		{"duplicate metadata key", "{" + ok + `,"metadata":{"a":"1","a":"2"}}`, "metadata[a]"},
		{"duplicate field", `{"amount":1000,` + ok + `}`, "amount"},
		{"unknown field", "{" + ok + `,"capture":true}`, "capture"},
	} {
		_, err := payment.ParseRequest([]byte(tt.body))
		if got := payment.ErrorParam(err); got != tt.param || payment.ErrorCode(err) != payment.EINVALID {
			t.Errorf("%s: param = %q (err %v), want %q", tt.name, got, err, tt.param)
		}
		if p := payment.ProblemOf(err); p.Param != tt.param {
			t.Errorf("%s: problem param = %q, want %q", tt.name, p.Param, tt.param)
		}
	}
}

// JSON null is no value of any field, in a payment or a refund: it is
// refused, naming the field, on the fast path and the slow one alike. Read
// as absent, a refund's null amount would refund all that is left, and a
// null metadata value would be stored as "" and match a later "".
func TestNullIsRefused(t *testing.T) {
	const ok = `"amount":1000,"currency":"EUR","source":"tok_visa"`
	for _, tt := range []struct {
		name, body, param string
	}{
		{"amount", `{"amount":null,"currency":"EUR","source":"tok_visa"}`, "amount"},
		{"currency", `{"amount":1000,"currency":null,"source":"tok_visa"}`, "currency"},
		{"source", `{"amount":1000,"currency":"EUR","source":null}`, "source"},
		{"description", "{" + ok + `,"description":null}`, "description"},
		{"metadata", "{" + ok + `,"metadata":null}`, "metadata"},
		{"metadata value", "{" + ok + `,"metadata":{"a":null}}`, "metadata[a]"},
		{"metadata value after others", "{" + ok + `,"metadata":{"a":"","b":null}}`, "metadata[b]"},
		{"metadata value, spaced", "{" + ok + `, "metadata" : { "a" : null } }`, "metadata[a]"},
		{"metadata value, slow path", "{" + ok + `,"description":"caf\u00e9","metadata":{"a":null}}`, "metadata[a]"},
		{"metadata value, many keys", "{" + ok + `,"metadata":{` + manyKeys(20) + `,"z":null}}`, "metadata[z]"},
	} {
		_, err := payment.ParseRequest([]byte(tt.body))
		if payment.ErrorCode(err) != payment.EINVALID || payment.ErrorParam(err) != tt.param {
			t.Errorf("payment, null %s: err = %v, param %q; want invalid with param %q", tt.name, err, payment.ErrorParam(err), tt.param)
		}
	}
	for _, tt := range []struct {
		name, body, param string
	}{
		{"amount", `{"amount":null}`, "amount"},
		{"amount with a reason", `{"amount":null,"reason":"duplicate"}`, "amount"},
		{"amount, slow path", `{"reason":"duplicate","amount" : null, "\u0061":1}`, "amount"},
		{"reason", `{"amount":100,"reason":null}`, "reason"},
	} {
		_, err := payment.ParseRefundRequest("pay_1", []byte(tt.body))
		if payment.ErrorCode(err) != payment.EINVALID || payment.ErrorParam(err) != tt.param {
			t.Errorf("refund, null %s: err = %v, param %q; want invalid with param %q", tt.name, err, payment.ErrorParam(err), tt.param)
		}
	}
	// Absent is not null: a refund without amount is of all that is left.
	for _, body := range []string{``, ` `, `{}`, `{"reason":"duplicate"}`} {
		r, err := payment.ParseRefundRequest("pay_1", []byte(body))
		if err != nil || r.Amount != 0 {
			t.Errorf("refund %q = %+v, %v; want all that is left", body, r, err)
		}
	}
}

// C1 control characters (U+0080-U+009F; U+009B starts a terminal escape)
// are control characters too, and an escaped unpaired UTF-16 surrogate,
// which encoding/json would quietly turn into U+FFFD (two different bodies
// reading alike), is rejected; both name the field. A real pair, an
// escaped backslash before "ud800" and a U+FFFD sent as such are text.
func TestParseRequestC1AndSurrogates(t *testing.T) {
	const ok = `"amount":1000,"currency":"EUR","source":"tok_visa"`
	for _, tt := range []struct {
		name, body, param string
	}{
		{"C1 in description, escaped", "{" + ok + `,"description":"a\u009b[2Jb"}`, "description"},
		{"C1 in description, raw", "{" + ok + ",\"description\":\"a\u0085b\"}", "description"},
		{"C1 in a metadata value", "{" + ok + `,"metadata":{"k":"\u0080"}}`, "metadata[k]"},
		{"C1 in a metadata key", "{" + ok + `,"metadata":{"k\u009f":"v"}}`, "metadata"},
		{"DEL in description", "{" + ok + `,"description":"a\u007fb"}`, "description"},
		{"lone high surrogate", "{" + ok + `,"description":"a\ud800b"}`, "description"},
		{"lone high surrogate at the end", "{" + ok + `,"description":"a\uD800"}`, "description"},
		{"high surrogate then another escape", "{" + ok + `,"description":"\ud800\u0041"}`, "description"},
		{"two high surrogates", "{" + ok + `,"description":"\ud800\ud800\udc00"}`, "description"},
		{"lone low surrogate", "{" + ok + `,"description":"\udfff"}`, "description"},
		{"lone surrogate in a metadata value", "{" + ok + `,"metadata":{"order":"\udc00"}}`, "metadata[order]"},
		{"lone surrogate in a metadata key", "{" + ok + `,"metadata":{"\ud800":"v"}}`, "metadata"},
		{"lone surrogate in source", `{"amount":1000,"currency":"EUR","source":"tok_\ud800"}`, "source"},
	} {
		_, err := payment.ParseRequest([]byte(tt.body))
		if payment.ErrorCode(err) != payment.EINVALID || payment.ErrorParam(err) != tt.param {
			t.Errorf("%s: err = %v, param %q; want invalid with param %q", tt.name, err, payment.ErrorParam(err), tt.param)
		}
	}
	for _, tt := range []struct{ name, body, description string }{
		{"surrogate pair", "{" + ok + `,"description":"\ud83d\ude00 \uD83D\uDE00"}`, "\U0001F600 \U0001F600"},
		{"escaped backslash before ud800", "{" + ok + `,"description":"\\ud800"}`, `\ud800`},
		{"U+FFFD sent as itself", "{" + ok + `,"description":"\ufffd` + "\ufffd" + `"}`, "\ufffd\ufffd"},
		{"Latin-1 letters above C1", "{" + ok + `,"description":"\u00a0caf\u00e9"}`, "\u00a0café"},
	} {
		r, err := payment.ParseRequest([]byte(tt.body))
		if err != nil || r.Description != tt.description {
			t.Errorf("%s: description %q, err %v; want %q", tt.name, r.Description, err, tt.description)
		}
	}
}
