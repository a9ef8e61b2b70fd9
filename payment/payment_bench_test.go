package payment

import "testing"

// benchBody is a typical checkout's request: every optional field in use.
const benchBody = `{"amount":1999,"currency":"EUR","source":"tok_visa","description":"Order 42",
	"metadata":{"order_id":"42","customer":"c_1009","channel":"web"}}`

// BenchmarkFingerprint is what every request pays to be compared with a
// retry: the canonical form and its SHA-256.
func BenchmarkFingerprint(b *testing.B) {
	req, err := ParseRequest([]byte(benchBody))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		req.Fingerprint()
	}
}

// BenchmarkParseRequest is the validation every request passes before it
// may claim anything: strict JSON checks, decoding and the field rules.
func BenchmarkParseRequest(b *testing.B) {
	body := []byte(benchBody)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}
