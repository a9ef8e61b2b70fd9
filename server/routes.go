package server

import (
	"net/http"

	"github.com/gorilla/mux"
	"github.com/oncepay/oncepay/web"
)

// routes is every route oncepay serves, in one place.
func (s *server) routes() http.Handler {
	r := mux.NewRouter()
	r.NotFoundHandler = http.HandlerFunc(s.handleNotFound)
	r.MethodNotAllowedHandler = http.HandlerFunc(s.handleMethodNotAllowed)

	r.HandleFunc("/healthz", s.handleHealthz).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/openapi.yaml", s.handleOpenAPI).Methods(http.MethodGet)

	if s.Admin.Store != nil {
		s.adminRoutes(r)
	}
	if s.Metrics != nil {
		r.Handle("/metrics", s.adminAuth(s.Metrics)).Methods(http.MethodGet)
	}

	api := r.PathPrefix("/v1").Subrouter()
	api.Use(s.authenticate)
	api.HandleFunc("/payments", s.handleCreatePayment).Methods(http.MethodPost)
	api.HandleFunc("/payments/{id}", s.handleGetPayment).Methods(http.MethodGet)

	if s.Sim != nil {
		r.PathPrefix("/sim/").Handler(s.Sim)
	}
	if s.Workshop != nil {
		r.PathPrefix("/demo").Handler(s.Workshop)
		r.Handle("/", http.RedirectHandler("/demo", http.StatusFound)).Methods(http.MethodGet)
	}
	return r
}

// adminRoutes are the admin page and its JSON, behind the admin credential.
// POSTs are refused when cross-origin: a browser sends Basic credentials
// along with a forged cross-site form.
func (s *server) adminRoutes(r *mux.Router) {
	csrf := http.NewCrossOriginProtection()
	r.Handle("/v1/attempts", s.adminAuth(http.HandlerFunc(s.handleListAttempts))).Methods(http.MethodGet)

	admin := r.PathPrefix("/admin").Subrouter()
	admin.Use(adminHeaders, s.adminAuth)
	admin.HandleFunc("", s.handleAdminList).Methods(http.MethodGet)
	admin.HandleFunc("/", s.handleAdminList).Methods(http.MethodGet)
	admin.HandleFunc("/attempts/{id}", s.handleAdminAttempt).Methods(http.MethodGet)
	admin.Handle("/attempts/{id}/reconcile", csrf.Handler(http.HandlerFunc(s.handleAdminReconcileOne))).Methods(http.MethodPost)
	admin.Handle("/reconcile", csrf.Handler(http.HandlerFunc(s.handleAdminReconcileAll))).Methods(http.MethodPost)
	admin.PathPrefix("/static/").Handler(http.StripPrefix("/admin", http.FileServerFS(web.Assets)))
}
