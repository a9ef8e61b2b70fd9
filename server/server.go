// Package server maps oncepay's HTTP API to the payment domain and back.
package server

import (
	"log/slog"
	"net/http"

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
	// CountRefund, if set, is told the outcome of every refund request.
	CountRefund func(outcome string)
	Log         *slog.Logger
}

type server struct {
	Config
}

// New returns oncepay's HTTP handler.
func New(cfg Config) http.Handler {
	s := &server{Config: cfg}
	return s.observe(s.routes())
}
