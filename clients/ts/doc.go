// Package ts holds a TypeScript checkout typed by the OpenAPI document
// alone (checkout.ts), and the test that generates its types from
// web/openapi.yaml, compiles it under tsc --strict and lints the document.
// It has no Go code of its own.
package ts
