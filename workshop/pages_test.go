package workshop

import (
	"io/fs"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/web"
)

// usedKeys are the catalog keys the pages and scripts name: {{t "key"}} in
// a template, a "section.name" literal in a script (T's argument, or a
// name T is called with later), and the sections scripts complete at run
// time ("state." + status).
func usedKeys(t *testing.T) (keys map[string]bool, prefixes []string) {
	t.Helper()
	keys = map[string]bool{}
	sections := map[string]bool{}
	for k := range Catalogs["en"] {
		sections[strings.SplitN(k, ".", 2)[0]] = true
	}
	tmplKey := regexp.MustCompile(`\{\{t "([^"]+)"`)
	jsLit := regexp.MustCompile(`"([a-z]+)\.([a-z0-9_]*)"`)
	for _, pattern := range []string{"workshop/*.html", "static/*.js"} {
		files, err := fs.Glob(web.Assets, pattern)
		if err != nil || len(files) == 0 {
			t.Fatalf("no %s: %v", pattern, err)
		}
		for _, f := range files {
			b, err := fs.ReadFile(web.Assets, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tmplKey.FindAllStringSubmatch(string(b), -1) {
				keys[m[1]] = true
			}
			if !strings.HasSuffix(f, ".js") {
				continue
			}
			for _, m := range jsLit.FindAllStringSubmatch(string(b), -1) {
				if !sections[m[1]] {
					continue // "/demo/..." paths and the like
				}
				if m[2] == "" {
					prefixes = append(prefixes, m[1]+".")
				} else {
					keys[m[1]+"."+m[2]] = true
				}
			}
		}
	}
	return keys, prefixes
}

// Every key is in both languages, none is empty, every key a page or
// script names exists, every key in the catalogs is used, and the keys a
// script completes at run time (a payment's status, an inbox state) exist
// for every value they can take.
func TestCatalogs(t *testing.T) {
	for _, l := range Langs[1:] {
		for k := range Catalogs[Langs[0]] {
			if _, ok := Catalogs[l][k]; !ok {
				t.Errorf("%q is in %s, not in %s", k, Langs[0], l)
			}
		}
		for k := range Catalogs[l] {
			if _, ok := Catalogs[Langs[0]][k]; !ok {
				t.Errorf("%q is in %s, not in %s", k, l, Langs[0])
			}
		}
	}
	for _, l := range Langs {
		for k, v := range Catalogs[l] {
			if strings.TrimSpace(v) == "" {
				t.Errorf("%s: %q is empty", l, k)
			}
		}
	}
	keys, prefixes := usedKeys(t)
	for k := range keys {
		if _, ok := Catalogs["en"][k]; !ok {
			t.Errorf("%q is used but in no catalog", k)
		}
	}
	slices.Sort(prefixes)
	if want := []string{"inbox.", "state."}; !slices.Equal(slices.Compact(prefixes), want) {
		t.Errorf("scripts complete keys under %q, want %q: check the list below", slices.Compact(prefixes), want)
	}
	dynamic := map[string]bool{}
	for _, s := range []payment.Status{payment.InProgress, payment.Succeeded, payment.Failed, payment.Queued, payment.Expired} {
		dynamic["state."+string(s)] = true
	}
	for _, s := range []payment.EventState{payment.EventReceived, payment.EventProcessing, payment.EventProcessed, payment.EventFailedState, payment.EventIgnored} {
		dynamic["inbox."+string(s)] = true
	}
	for k := range dynamic {
		if _, ok := Catalogs["en"][k]; !ok {
			t.Errorf("%q can be shown but is in no catalog", k)
		}
	}
	for k := range Catalogs["en"] {
		if !keys[k] && !dynamic[k] {
			t.Errorf("%q is in the catalogs but no page uses it", k)
		}
	}
}

// Every page renders in every language with no key left untranslated;
// ?lang= is remembered in a cookie, which wins over Accept-Language, which
// wins over the default.
func TestPagesAndLanguage(t *testing.T) {
	h := New(Config{Scope: "demo"})
	get := func(path string, header ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for _, page := range []string{"/demo", "/demo/handout"} {
		for _, l := range Langs {
			w := get(page + "?lang=" + l)
			if w.Code != 200 || !strings.Contains(w.Body.String(), `<html lang="`+l+`">`) {
				t.Errorf("GET %s?lang=%s = %d, want 200 in %s", page, l, w.Code, l)
			}
			if strings.Contains(w.Body.String(), "⟦") {
				t.Errorf("GET %s?lang=%s shows untranslated keys", page, l)
			}
			if c := w.Result().Cookies(); len(c) != 1 || c[0].Value != l {
				t.Errorf("GET %s?lang=%s sets cookies %v, want %s remembered", page, l, c, l)
			}
		}
	}
	for _, tt := range []struct {
		name   string
		header []string
		want   string
	}{
		{"nothing", nil, "en"},
		{"Accept-Language uz", []string{"Accept-Language", "uz-UZ,uz;q=0.9,ru;q=0.8"}, "uz"},
		{"Accept-Language en first", []string{"Accept-Language", "en-GB,uz;q=0.5"}, "en"},
		{"Accept-Language other", []string{"Accept-Language", "fr-FR"}, "en"},
		{"Accept-Language malformed", []string{"Accept-Language", ";;;q=x"}, "en"},
		{"cookie over Accept-Language", []string{"Accept-Language", "en", "Cookie", langCookie + "=uz"}, "uz"},
		{"unknown cookie", []string{"Accept-Language", "uz", "Cookie", langCookie + "=xx"}, "uz"},
	} {
		w := get("/demo", tt.header...)
		if !strings.Contains(w.Body.String(), `<html lang="`+tt.want+`">`) {
			t.Errorf("%s: page not in %s", tt.name, tt.want)
		}
	}
	if w := get("/demo?lang=xx", "Accept-Language", "uz"); !strings.Contains(w.Body.String(), `<html lang="uz">`) || len(w.Result().Cookies()) != 0 {
		t.Errorf("?lang=xx: want Accept-Language's uz and no cookie")
	}
}
