package web

import "embed"

// Assets holds the admin page's templates (templates/*.html: layout.html
// and one file a page) and its static files (static/), served offline.
//
//go:embed templates/*.html static/*
var Assets embed.FS
