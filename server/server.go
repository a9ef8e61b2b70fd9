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
	Log *slog.Logger
}

type server struct {
	Config
}

// New returns oncepay's HTTP handler.
func New(cfg Config) http.Handler {
	s := &server{Config: cfg}
	return s.routes()
}
