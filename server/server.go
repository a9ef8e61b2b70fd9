// Package server maps oncepay's HTTP API to the payment domain and back.
package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

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
	// Replica, if set, tells where replication stands: GET /healthz answers
	// 503 replica-behind while it is behind, and every admin page shows it.
	Replica func() ReplicaStatus
	Log     *slog.Logger
}

// ReplicaStatus is where the replica of the database stands.
type ReplicaStatus struct {
	Lag      time.Duration // what a machine lost now would lose, at most
	MaxLag   time.Duration // past it, the replica is behind
	LastSync time.Time     // when the last successful sync ended; zero before it
	Errors   int64         // syncs that failed since start
}

// Behind reports whether the replica is further behind than allowed.
func (r ReplicaStatus) Behind() bool { return r.Lag > r.MaxLag }

// LagText is the lag as people read it.
func (r ReplicaStatus) LagText() string { return r.Lag.Round(100 * time.Millisecond).String() }

// Detail says how far behind the replica is.
func (r ReplicaStatus) Detail() string {
	return fmt.Sprintf("The replica is %s behind, over --replica-max-lag (%s); %d syncs failed since start.",
		r.Lag.Round(time.Millisecond), r.MaxLag, r.Errors)
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
