package server

import (
	"net/http"

	"github.com/gorilla/mux"
	"github.com/oncepay/oncepay/internal/fallback"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/web"
)

// routes is every route oncepay serves, in one place. The router is flat,
// each route wrapped in its own middleware: gorilla/mux subrouters answer
// 404 instead of 405 when only the method is wrong.
func (s *server) routes() http.Handler {
	r := mux.NewRouter()
	s.router = r
	r.NotFoundHandler = http.HandlerFunc(s.handleNotFound)
	r.MethodNotAllowedHandler = http.HandlerFunc(s.handleMethodNotAllowed)

	r.HandleFunc("/healthz", s.handleHealthz).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/openapi.yaml", s.handleOpenAPI).Methods(http.MethodGet)

	r.Handle("/v1/payments", s.authenticate(http.HandlerFunc(s.handleCreatePayment))).Methods(http.MethodPost)
	r.Handle("/v1/payments", s.authenticate(http.HandlerFunc(s.handleListPayments))).Methods(http.MethodGet)
	r.Handle("/v1/payments/{id}", s.authenticate(http.HandlerFunc(s.handleGetPayment))).Methods(http.MethodGet)
	r.Handle("/v1/payments/{id}/refunds", s.authenticate(http.HandlerFunc(s.handleCreateRefund))).Methods(http.MethodPost)
	r.Handle("/v1/payments/{id}/refunds", s.authenticate(http.HandlerFunc(s.handleListRefunds))).Methods(http.MethodGet)
	r.Handle("/v1/events", s.authenticate(http.HandlerFunc(s.handleListEvents))).Methods(http.MethodGet)
	// The provider signs its events; no API key is asked for.
	r.HandleFunc("/v1/webhooks/{provider}", s.handleWebhook).Methods(http.MethodPost)

	if s.Admin.Store != nil {
		s.adminRoutes(r)
	}
	if s.Metrics != nil {
		r.Handle("/metrics", s.adminAuth(s.Metrics)).Methods(http.MethodGet)
	}
	if s.Sim != nil {
		// The ledger and the fault knobs are the operator's, not the
		// merchants': in serve they need the admin credential.
		r.PathPrefix("/sim/").Handler(s.adminAuth(crossOrigin().Handler(s.Sim)))
	}
	if s.Workshop != nil {
		// Its POSTs crash, charge and reconcile: no cross-site page may send them.
		r.PathPrefix("/demo").Handler(crossOrigin().Handler(s.Workshop))
		r.Handle("/", http.RedirectHandler("/demo", http.StatusFound)).Methods(http.MethodGet)
	}
	return r
}

// adminRoutes are the admin page and its JSON, behind the admin credential.
// POSTs are refused when cross-origin: a browser sends Basic credentials
// along with a forged cross-site form.
func (s *server) adminRoutes(r *mux.Router) {
	csrf := crossOrigin()
	page := func(h http.Handler) http.Handler { return adminHeaders(s.adminAuth(h)) }
	form := func(h http.HandlerFunc) http.Handler { return page(csrf.Handler(h)) }

	r.Handle("/v1/attempts", s.adminAuth(http.HandlerFunc(s.handleListAttempts))).Methods(http.MethodGet)
	r.Handle("/admin", page(http.HandlerFunc(s.handleAdminList))).Methods(http.MethodGet)
	r.Handle("/admin/", page(http.HandlerFunc(s.handleAdminList))).Methods(http.MethodGet)
	r.Handle("/admin/attempts/{id}", page(http.HandlerFunc(s.handleAdminAttempt))).Methods(http.MethodGet)
	r.Handle("/admin/attempts/{id}/reconcile", form(s.handleAdminReconcileOne)).Methods(http.MethodPost)
	r.Handle("/admin/reconcile", form(s.handleAdminReconcileAll)).Methods(http.MethodPost)
	r.Handle("/admin/events", page(http.HandlerFunc(s.handleAdminEvents))).Methods(http.MethodGet)
	if s.Admin.Forwarder != nil {
		r.Handle("/admin/queue", page(http.HandlerFunc(s.handleAdminQueue))).Methods(http.MethodGet)
		r.Handle("/admin/forward", form(s.handleAdminForward)).Methods(http.MethodPost)
	}
	if s.Admin.Endpoints != nil {
		r.Handle("/admin/endpoints", page(http.HandlerFunc(s.handleAdminEndpoints))).Methods(http.MethodGet)
		r.Handle("/admin/endpoints/{id}", page(http.HandlerFunc(s.handleAdminEndpoint))).Methods(http.MethodGet)
		if s.Admin.Deliverer != nil {
			r.Handle("/admin/endpoints/{id}/deliveries/{event}/redeliver", form(s.handleAdminRedeliverDelivery)).Methods(http.MethodPost)
		}
	}
	r.Handle("/admin/events/{provider}/{id}/redeliver", form(s.handleAdminRedeliver)).Methods(http.MethodPost)
	r.PathPrefix("/admin/static/").Handler(page(http.StripPrefix("/admin", fallback.Static(web.Assets, http.HandlerFunc(s.handleNotFound))))).
		Methods(http.MethodGet, http.MethodHead)
}

// crossOrigin refuses cross-origin browser requests that change state (a
// forged form or fetch from another site, which carries the browser's
// credentials), with a problem.
func crossOrigin() *http.CrossOriginProtection {
	c := http.NewCrossOriginProtection()
	c.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, payment.Problem{Type: payment.ProblemCrossOrigin, Title: "Cross-origin request refused", Status: http.StatusForbidden,
			Detail: "A page of another site may not change state here: use this server's own page, or a client that is not a browser."})
	}))
	return c
}
