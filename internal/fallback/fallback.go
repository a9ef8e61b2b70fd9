// Package fallback answers, in the caller's own format, the requests that
// net/http's helpers would answer in text/plain: what an http.ServeMux has
// no pattern for (404, or 405 with Allow) and a file an http.FileServer
// does not have. oncepay answers every such request as a problem.
package fallback

import (
	"io/fs"
	"net/http"
	"strings"
)

// methods are those a route may be registered for.
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// Mux serves what mux has a pattern for; the rest goes to methodNotAllowed,
// with the Allow header already set, when the path exists for another
// method, and to notFound otherwise.
func Mux(mux *http.ServeMux, notFound, methodNotAllowed http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		allow := Allowed(func(r *http.Request) bool {
			_, pattern := mux.Handler(r)
			return pattern != ""
		}, r)
		if len(allow) == 0 {
			notFound.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		methodNotAllowed.ServeHTTP(w, r)
	})
}

// Allowed is the methods r's path is served for, by routes reporting
// whether a request would be served.
func Allowed(routes func(*http.Request) bool, r *http.Request) []string {
	var allow []string
	for _, m := range methods {
		if m == r.Method {
			continue
		}
		r2 := r.Clone(r.Context())
		r2.Method = m
		if routes(r2) {
			allow = append(allow, m)
		}
	}
	return allow
}

// Static serves the regular files of fsys at the request's path (after
// any prefix was stripped); anything else, a directory included (no
// listings), goes to notFound.
func Static(fsys fs.FS, notFound http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/")
		if fi, err := fs.Stat(fsys, name); err != nil || !fi.Mode().IsRegular() {
			notFound.ServeHTTP(w, r)
			return
		}
		http.ServeFileFS(w, r, fsys, name)
	})
}
