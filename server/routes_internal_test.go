package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gorilla/mux"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/web"
)

// noAdminStore and noEndpointStore stand in for the admin's stores:
// walking routes calls no handler.
type (
	noAdminStore    struct{ payment.AdminStore }
	noEndpointStore struct{ payment.EndpointStore }
)

// Every route the router serves is in the OpenAPI document, and the document
// lists no route the router lacks: the spec cannot drift from routes.go.
func TestRoutesMatchOpenAPI(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(web.OpenAPI)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	specOps := map[string]bool{} // "METHOD /path"
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			specOps[method+" "+path] = true
		}
	}

	// Every optional part set, so the routes served only with the simulated
	// provider, the admin surface, the metrics or the demo are walked too.
	cfg := Config{Sim: http.NotFoundHandler(), Admin: Admin{Store: noAdminStore{}, Forwarder: &payment.Forwarder{}, Endpoints: noEndpointStore{},
		Deliverer: &payment.Deliverer{}},
		Metrics: http.NotFoundHandler(), Workshop: http.NotFoundHandler()}
	router, ok := (&server{Config: cfg}).routes().(*mux.Router)
	if !ok {
		t.Fatal("routes() is not a *mux.Router")
	}
	served := map[string]bool{}
	var mounts []string // prefixes handed whole to another handler, such as /sim/
	err = router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		if route.GetHandler() == nil {
			return nil // a subrouter's prefix: its routes are walked on their own
		}
		path, err := route.GetPathTemplate()
		if err != nil {
			return err
		}
		if re, err := route.GetPathRegexp(); err == nil && !strings.HasSuffix(re, "$") {
			mounts = append(mounts, path) // a prefix mounted for another handler
			return nil
		}
		methods, err := route.GetMethods()
		if err != nil {
			return err
		}
		for _, m := range methods {
			served[m+" "+path] = true
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk routes: %v", err)
	}

	covered := map[string]bool{} // mount prefix: some spec path lies under it
	for op := range specOps {
		_, path, _ := strings.Cut(op, " ")
		mounted := false
		for _, prefix := range mounts {
			if strings.HasPrefix(path, prefix) {
				covered[prefix], mounted = true, true
			}
		}
		if !served[op] && !mounted {
			t.Errorf("openapi.yaml has %s, which the router does not serve", op)
		}
	}
	for op := range served {
		if !specOps[op] {
			t.Errorf("route %s is not in openapi.yaml", op)
		}
	}
	for _, prefix := range mounts {
		if !covered[prefix] {
			t.Errorf("nothing under the mounted prefix %s is in openapi.yaml", prefix)
		}
	}
}
