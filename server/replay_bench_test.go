package server_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// BenchmarkReplay is a replay's cost inside oncepay, without the socket:
// the router, authentication, the key and body checks, the replay cache,
// the stored bytes and the request's log line (JSON, to io.Discard), run
// straight on the server's handler. The side-by-side measures it over HTTP.
//
//	go test -run '^$' -bench Replay -benchmem ./server
func BenchmarkReplay(b *testing.B) {
	e := newEnv(b, envOptions{auth: true})
	_, secret := e.apiKey("bench")
	body := []byte(`{"amount":1000,"currency":"USD","source":"tok_visa"}`)
	auth := "Bearer " + secret
	first := e.pay("replayed", string(body), "Authorization", auth)
	if first.Status != http.StatusCreated {
		b.Fatalf("first payment = %d %s", first.Status, first.Body)
	}
	h := e.Server.Config.Handler
	// The request as net/http would hand it over, made without parsing one
	// (httptest.NewRequest's reader would be most of what is allocated).
	u := &url.URL{Path: "/v1/payments"}
	header := http.Header{"Authorization": {auth}, "Idempotency-Key": {"replayed"}, "Content-Type": {"application/json"}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r := (&http.Request{Method: http.MethodPost, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: header, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
			Host: "127.0.0.1", RemoteAddr: "127.0.0.1:1234", RequestURI: u.Path}).WithContext(ctx)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated || !bytes.Equal(w.Body.Bytes(), first.Body) {
			b.Fatalf("replay = %d %s, want the first answer's bytes", w.Code, w.Body)
		}
	}
}
