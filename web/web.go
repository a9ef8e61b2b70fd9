// Package web holds the files oncepay serves, embedded so the one binary
// needs nothing beside it: the OpenAPI document of the API, and the admin
// page's templates and static files.
package web

import _ "embed" // for go:embed

// OpenAPI is the OpenAPI 3.1 document of oncepay's public API, served at
// /openapi.yaml. It is the contract docs/api.md describes.
//
//go:embed openapi.yaml
var OpenAPI []byte
