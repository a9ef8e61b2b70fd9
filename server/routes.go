package server

import (
	"net/http"

	"github.com/gorilla/mux"
)

// routes is every route oncepay serves, in one place.
func (s *server) routes() http.Handler {
	r := mux.NewRouter()
	r.NotFoundHandler = http.HandlerFunc(s.handleNotFound)
	r.MethodNotAllowedHandler = http.HandlerFunc(s.handleMethodNotAllowed)

	r.HandleFunc("/healthz", s.handleHealthz).Methods(http.MethodGet, http.MethodHead)

	api := r.PathPrefix("/v1").Subrouter()
	api.Use(s.authenticate)
	api.HandleFunc("/payments", s.handleCreatePayment).Methods(http.MethodPost)
	api.HandleFunc("/payments/{id}", s.handleGetPayment).Methods(http.MethodGet)

	if s.Sim != nil {
		r.PathPrefix("/sim/").Handler(s.Sim)
	}
	return r
}
