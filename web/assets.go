package web

import "embed"

// Assets holds the admin page's templates (templates/*.html: layout.html
// and one file a page), the workshop's pages (workshop/*.html) and their
// strings in each language (i18n/LANG.json), and the static files
// (static/), served offline.
//
//go:embed templates/*.html static/* workshop/*.html i18n/*.json
var Assets embed.FS
