package workshop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"golang.org/x/text/language"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/web"
)

// Langs are the languages the workshop speaks, the first the default.
var Langs = []string{"en", "uz"}

// Catalogs holds every string the workshop's pages show, one flat map of
// key to text per language, from web/i18n/LANG.json. The catalog is ours
// and embedded, so its text may hold markup (<b>, <code>).
var Catalogs = loadCatalogs()

func loadCatalogs() map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, l := range Langs {
		b, err := fs.ReadFile(web.Assets, path.Join("i18n", l+".json"))
		if err != nil {
			panic("workshop: catalog missing from this build: " + err.Error())
		}
		m := map[string]string{}
		if err := json.Unmarshal(b, &m); err != nil {
			panic("workshop: catalog " + l + ": " + err.Error())
		}
		out[l] = m
	}
	return out
}

// Missing marks a key a catalog lacks, so a test can find it on the page.
func Missing(key string) string { return "⟦" + key + "⟧" }

// T returns the text of key in lang, with {0}, {1}... replaced by args.
func T(lang, key string, args ...any) string {
	s, ok := Catalogs[lang][key]
	if !ok {
		return Missing(key)
	}
	for i, a := range args {
		s = strings.ReplaceAll(s, fmt.Sprintf("{%d}", i), fmt.Sprint(a))
	}
	return s
}

var matcher = language.NewMatcher([]language.Tag{language.English, language.Uzbek})

// langCookie remembers the language a visitor chose.
const langCookie = "oncepay_lang"

// pickLang is the page's language: ?lang= (remembered in a cookie), then
// the cookie, then the browser's Accept-Language, then English.
func pickLang(w http.ResponseWriter, r *http.Request) string {
	if l := r.URL.Query().Get("lang"); known(l) {
		http.SetCookie(w, &http.Cookie{Name: langCookie, Value: l, Path: "/demo", MaxAge: 365 * 24 * 3600, SameSite: http.SameSiteLaxMode, HttpOnly: true})
		return l
	}
	if c, err := r.Cookie(langCookie); err == nil && known(c.Value) {
		return c.Value
	}
	if al := r.Header.Get("Accept-Language"); al != "" {
		tags, _, _ := language.ParseAcceptLanguage(al) // a malformed header is English
		if len(tags) > 0 {
			_, i, conf := matcher.Match(tags...)
			if conf != language.No {
				return Langs[i]
			}
		}
	}
	return Langs[0]
}

func known(l string) bool {
	for _, k := range Langs {
		if l == k {
			return true
		}
	}
	return false
}

// pageData is what every workshop page is rendered with.
type pageData struct {
	Lang, Other string
	// Strings is the catalog of Lang as JSON, for the page's script.
	Strings template.JS
}

func parsePages() map[string]*template.Template {
	pages := map[string]*template.Template{}
	for _, name := range []string{"demo", "handout"} {
		t := template.New(name + ".html").Funcs(template.FuncMap{
			// t is replaced per request by the page's language.
			"t": func(string, ...any) template.HTML { return "" },
		})
		pages[name] = template.Must(t.ParseFS(web.Assets, "workshop/"+name+".html"))
	}
	return pages
}

// render writes page name in the request's language.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, name string) {
	lang := pickLang(w, r)
	other := Langs[0]
	if lang == Langs[0] {
		other = Langs[1]
	}
	js, err := json.Marshal(Catalogs[lang])
	if err != nil {
		h.internal(w, err)
		return
	}
	t, err := h.pages[name].Clone()
	if err != nil {
		h.internal(w, err)
		return
	}
	t.Funcs(template.FuncMap{"t": func(key string, args ...any) template.HTML {
		return template.HTML(T(lang, key, args...)) // the catalog is ours, embedded
	}})
	var buf bytes.Buffer
	if err := t.Execute(&buf, pageData{Lang: lang, Other: other, Strings: template.JS(js)}); err != nil {
		h.internal(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Language", lang)
	w.Header().Set("Vary", "Accept-Language, Cookie")
	w.Header().Set("Cache-Control", "no-store")
	buf.WriteTo(w)
}

func (h *Handler) internal(w http.ResponseWriter, err error) {
	h.Service.Log.Error("workshop: page not rendered", "err", err)
	writeProblem(w, payment.Problem{Type: payment.ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError})
}

func (h *Handler) handlePage(w http.ResponseWriter, r *http.Request) { h.render(w, r, "demo") }

// handleHandout is the one-page handout to print for a class.
func (h *Handler) handleHandout(w http.ResponseWriter, r *http.Request) { h.render(w, r, "handout") }
