package server

import (
	"net/http"
	"strconv"

	"github.com/oncepay/oncepay/web"
)

// handleOpenAPI is GET /openapi.yaml: the API's contract, served by the
// binary it describes so a client generator reads the version it talks to.
func (s *server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/yaml")
	h.Set("Content-Length", strconv.Itoa(len(web.OpenAPI)))
	w.WriteHeader(http.StatusOK)
	w.Write(web.OpenAPI)
}
