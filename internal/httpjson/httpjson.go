// Package httpjson writes the JSON and RFC 9457 problem responses of every
// HTTP handler in oncepay (the API, the workshop, the simulated provider),
// so each answer carries the same headers however it is made.
package httpjson

import (
	"encoding/json"
	"net/http"
	"strconv"
)

const (
	ContentTypeJSON    = "application/json"
	ContentTypeProblem = "application/problem+json"
)

// Write writes body with status and contentType. Nothing is cached: every
// answer is about money or state that changes.
func Write(w http.ResponseWriter, status int, contentType string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(body) // fails only if the client left
}

// Answer writes a stored answer: JSON for success, a problem from 400 on.
func Answer(w http.ResponseWriter, status int, body []byte) {
	ct := ContentTypeJSON
	if status >= 400 {
		ct = ContentTypeProblem
	}
	Write(w, status, ct, body)
}

// JSON writes v as application/json, newline-terminated, whatever status.
func JSON(w http.ResponseWriter, status int, v any) {
	Write(w, status, ContentTypeJSON, marshal(w, v))
}

// Problem writes p, an RFC 9457 problem whose status is status.
func Problem(w http.ResponseWriter, status int, p any) {
	Write(w, status, ContentTypeProblem, marshal(w, p))
}

func marshal(w http.ResponseWriter, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil { // only a caller's bug: a value JSON cannot hold
		return []byte(`{"type":"/problems/internal-error","title":"Internal error","status":500}` + "\n")
	}
	return append(b, '\n')
}
