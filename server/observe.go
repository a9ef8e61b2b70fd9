package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// requestInfo is what a handler learns that the request log line reports.
type requestInfo struct {
	scope   string
	keyHash string
	outcome string
}

const infoKey ctxKey = 1

func infoOf(r *http.Request) *requestInfo {
	if info, ok := r.Context().Value(infoKey).(*requestInfo); ok {
		return info
	}
	return &requestInfo{} // a handler run outside observe: nothing reports it
}

// keyHash identifies an idempotency key in logs without writing it: keys
// may carry client data, and a log is read by more people than the database.
func keyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observe gives every request an id (X-Request-Id), logs one line for it,
// and counts payment requests by outcome. The line never holds a secret:
// no API key, no raw idempotency key, no card token, no query string.
func (s *server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := rand.Text()[:16]
		w.Header().Set("X-Request-Id", id)
		info := &requestInfo{}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), infoKey, info)))
		if info.outcome == "" {
			info.outcome = outcomeOfStatus(sw.status)
		}
		if r.Method == http.MethodPost && s.CountRequest != nil {
			if r.URL.Path == "/v1/payments" {
				s.CountRequest(info.outcome)
			} else if strings.HasPrefix(r.URL.Path, "/v1/payments/") && strings.HasSuffix(r.URL.Path, "/refunds") && s.CountRefund != nil {
				s.CountRefund(info.outcome)
			}
		}
		// Typed attributes: no value is boxed on the way to the handler.
		s.Log.LogAttrs(r.Context(), slog.LevelInfo, "request", slog.String("request_id", id),
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", sw.status),
			slog.String("merchant", info.scope), slog.String("key_hash", info.keyHash), slog.String("outcome", info.outcome),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000))
	})
}

// outcomeOfStatus names the outcome of a request no handler named.
func outcomeOfStatus(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "unauthorized"
	case status == http.StatusNotFound:
		return "not_found"
	case status >= 500:
		return "internal"
	case status >= 400:
		return "bad_request"
	}
	return "ok"
}
