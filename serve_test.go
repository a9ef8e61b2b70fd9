package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// What Go's HTTP server answers before oncepay's handler runs is what
// docs/api.md says: the request line and headers get 16 KiB in all, and each
// refusal's status and Content-Type (a 417 has none, and no body).
func TestAnswersBeforeOncepay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "reached")
		w.WriteHeader(http.StatusNoContent)
	})
	go func() { done <- serveHTTP(ctx, ln, h, time.Second, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	// head is a GET whose request line and headers are size bytes in all.
	head := func(size int) string {
		start, end := "GET /healthz HTTP/1.1\r\nHost: oncepay\r\nX-Pad: ", "\r\nConnection: close\r\n\r\n"
		return start + strings.Repeat("a", size-len(start)-len(end)) + end
	}
	for _, tt := range []struct {
		name, request string
		status        int
		contentType   string // "" for none
		emptyBody     bool
	}{
		{"headers of 16 KiB", head(maxHeaderBytes), 204, "", true},
		{"headers a byte over 16 KiB", head(maxHeaderBytes + 1), 431, "text/plain; charset=utf-8", false},
		{"an Expect other than 100-continue", "POST /v1/payments HTTP/1.1\r\nHost: oncepay\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}", 417, "", true},
		{"a malformed header", "GET /healthz HTTP/1.1\r\nHost: oncepay\r\nBad Header: x\r\n\r\n", 400, "text/plain; charset=utf-8", false},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", 400, "text/plain; charset=utf-8", false},
		{"HTTP/3.0", "GET /healthz HTTP/3.0\r\nHost: oncepay\r\n\r\n", 505, "text/plain; charset=utf-8", false},
		{"a Transfer-Encoding other than chunked", "POST /v1/payments HTTP/1.1\r\nHost: oncepay\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "text/plain; charset=utf-8", false},
	} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(c, tt.request)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		c.Close()
		if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != tt.contentType || (len(body) == 0) != tt.emptyBody {
			t.Errorf("%s: %d, Content-Type %q, body %q; want %d, Content-Type %q, empty body %v",
				tt.name, resp.StatusCode, resp.Header.Get("Content-Type"), body, tt.status, tt.contentType, tt.emptyBody)
		}
		if reached := resp.Header.Get("X-Request-Id") != ""; reached != (tt.status == 204) {
			t.Errorf("%s: reached the handler %v", tt.name, reached)
		}
	}
}
