// Package server maps oncepay's HTTP API to the payment domain and back.
package server

import (
	"log/slog"
	"net/http"

	"github.com/gorilla/mux"
	"github.com/oncepay/oncepay/payment"
)

// DemoScope is the one scope of demo mode, where no API key is asked for.
const DemoScope = "demo"

// Config is what the server needs.
type Config struct {
	Payments *payment.Service
	// Keys authenticates merchants. Nil means demo mode: no API key, every
	// request in DemoScope.
	Keys payment.KeyStore
	// Sim, when the provider is the simulated one, serves /sim/ (the ledger
	// and the fault knobs).
	Sim http.Handler
	// Admin is the admin surface; with no Store it is not served at all.
	Admin Admin
	// Metrics, if set, serves GET /metrics behind the admin credential.
	Metrics http.Handler
	// Workshop, demo mode only, serves /demo: the workshop page and its
	// deliberately wrong path. Serve leaves it nil, so it has no route.
	Workshop http.Handler
	// CountRequest, if set, is told the outcome of every POST /v1/payments.
	CountRequest func(outcome string)
	// Inbox applies provider events; Webhooks verify them, by provider name,
	// at POST /v1/webhooks/{name}. Without either the route answers 404.
	Inbox    *payment.Inbox
	Webhooks map[string]WebhookVerifier
	// CountWebhook, if set, is told of every webhook refused before the
	// inbox (outcome invalid or too_large); the inbox counts the rest.
	CountWebhook func(provider, eventType, outcome string)
	// CountRefund, if set, is told the outcome of every refund request.
	CountRefund func(outcome string)
	// ReplicaBehind, if set, is asked at each GET /healthz: behind makes it
	// 503 replica-behind, detail saying how far.
	ReplicaBehind func() (detail string, behind bool)
	Log           *slog.Logger
}

type server struct {
	Config
	router *mux.Router // set by routes; the 405 answer asks it which methods a path has
	// adminFailures slows down guessing the admin credential.
	adminFailures *failureLimiter
}

// New returns oncepay's HTTP handler.
func New(cfg Config) http.Handler {
	s := &server{Config: cfg, adminFailures: newFailureLimiter(adminFailureBurst, adminFailureEvery)}
	return s.observe(s.routes())
}
