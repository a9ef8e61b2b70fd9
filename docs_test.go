package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The project's Markdown: README.md is the front door, docs/ holds a page
// per subject, and the root and deploy/ hold the rest.
var docGlobs = []string{"*.md", "docs/*.md", "deploy/*.md"}

// TestDocLinksResolve checks every relative link and image of the project's
// Markdown: the file it names exists, and its #fragment is the anchor GitHub
// gives one of that file's headings. Web links are not fetched.
func TestDocLinksResolve(t *testing.T) {
	var files []string
	for _, g := range docGlobs {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 3 {
		t.Fatalf("found %d Markdown files, want README.md and docs/", len(files))
	}
	anchors := map[string]map[string]bool{} // by file, as read
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		anchors[path] = headingAnchors(string(src))
		return anchors[path], nil
	}
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(src)) {
			if err := checkLink(file, l.target, anchorsOf); err != nil {
				t.Errorf("%s:%d: link %q: %v", file, l.line, l.target, err)
			}
		}
	}
}

// checkLink resolves a link target written in file.
func checkLink(file, target string, anchorsOf func(string) (map[string]bool, error)) error {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return nil // not fetched
	}
	path, fragment, _ := strings.Cut(target, "#")
	if path == "" {
		path = file
	} else {
		path = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no such file %s", path)
	}
	if fragment == "" {
		return nil
	}
	if !strings.HasSuffix(path, ".md") {
		return fmt.Errorf("a #fragment into %s, which has no headings", path)
	}
	a, err := anchorsOf(path)
	if err != nil {
		return err
	}
	if !a[fragment] {
		return fmt.Errorf("no heading of %s has the anchor #%s", path, fragment)
	}
	return nil
}

type mdLink struct {
	line   int
	target string
}

var (
	fenceLine  = regexp.MustCompile("^ {0,3}(```|~~~)")
	codeSpan   = regexp.MustCompile("`+(?:[^`\n]|\n[^`\n])*`+") // not over a blank line
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	headingRe  = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// markdownLinks returns the targets of the inline links and images and of
// the link reference definitions in src, outside code blocks and code spans.
func markdownLinks(src string) []mdLink {
	var links []mdLink
	for n, line := range proseLines(src) {
		if line == "" {
			continue
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			links = append(links, mdLink{n + 1, m[1]})
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			links = append(links, mdLink{n + 1, m[1]})
		}
	}
	return links
}

// proseLines returns src's lines with fenced code blocks blanked and code
// spans removed, so neither is read as a link or a heading. A code span may
// run over a line break, as it may in Markdown.
func proseLines(src string) []string {
	lines := strings.Split(src, "\n")
	fence := ""
	for i, l := range lines {
		if m := fenceLine.FindStringSubmatch(l); m != nil {
			switch {
			case fence == "":
				fence = m[1]
			case m[1] == fence:
				fence = ""
			}
			lines[i] = ""
			continue
		}
		if fence != "" {
			lines[i] = ""
		}
	}
	// Remove code spans over the whole text, keeping the line breaks they
	// cross so line numbers stay true.
	text := codeSpan.ReplaceAllStringFunc(strings.Join(lines, "\n"), func(s string) string {
		return strings.Repeat("\n", strings.Count(s, "\n"))
	})
	return strings.Split(text, "\n")
}

// headingAnchors returns the anchors GitHub makes for the headings of src
// (and any <a name> or <a id> in it).
func headingAnchors(src string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	lines := strings.Split(src, "\n")
	fence := ""
	for _, l := range lines {
		if m := fenceLine.FindStringSubmatch(l); m != nil {
			switch {
			case fence == "":
				fence = m[1]
			case m[1] == fence:
				fence = ""
			}
			continue
		}
		if fence != "" {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			anchors[m[1]] = true
		}
		m := headingRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		slug := githubSlug(m[1])
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

var mdLinkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// githubSlug is the anchor GitHub gives a heading: its text as rendered
// (links become their text, code spans their code), in lower case, every
// character but letters, digits, spaces, '-' and '_' dropped, and each
// space a '-'.
func githubSlug(heading string) string {
	text := mdLinkText.ReplaceAllString(heading, "$1")
	text = strings.ReplaceAll(text, "`", "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGithubSlug(t *testing.T) {
	for _, tt := range []struct{ heading, want string }{
		{"How it works", "how-it-works"},
		{"The client's side: one key per intent", "the-clients-side-one-key-per-intent"},
		{"Refunds: POST and GET /v1/payments/{id}/refunds", "refunds-post-and-get-v1paymentsidrefunds"},
		{"Moving a SQLite installation: `oncepay copy`", "moving-a-sqlite-installation-oncepay-copy"},
		{"Side by side (issue 15)", "side-by-side-issue-15"},
		{"Fourth pass: a slow bank at 1,000 connections (Tue Dec 1 2026, 06:21-08:05 UTC)", "fourth-pass-a-slow-bank-at-1000-connections-tue-dec-1-2026-0621-0805-utc"},
		{"`serve` and `demo`", "serve-and-demo"},
		{"See [the API](api.md)", "see-the-api"},
		{"snake_case stays", "snake_case-stays"},
	} {
		if got := githubSlug(tt.heading); got != tt.want {
			t.Errorf("githubSlug(%q) = %q, want %q", tt.heading, got, tt.want)
		}
	}
}

func TestHeadingAnchors(t *testing.T) {
	src := "# Title\n\n## Twice\n\n```sh\n# not a heading\n```\n\n## Twice\n\n<a id=\"kept\"></a>\n"
	got := headingAnchors(src)
	for _, want := range []string{"title", "twice", "twice-1", "kept"} {
		if !got[want] {
			t.Errorf("headingAnchors lacks %q: %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("headingAnchors read a comment in a code block as a heading")
	}
}

func TestMarkdownLinks(t *testing.T) {
	src := "See [a](a.md#x) and ![img](p.png \"title\").\n" +
		"`[not](code.md)`\n" +
		"```\n[fenced](no.md)\n```\n" +
		"[ref]: docs/r.md\n" +
		"<https://example.com> [web](https://example.com/x)\n"
	var got []string
	for _, l := range markdownLinks(src) {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	want := []string{"1:a.md#x", "1:p.png", "6:docs/r.md", "7:https://example.com/x"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("markdownLinks = %v, want %v", got, want)
	}
}

// TestFlagsDocumented checks that every flag a command's --help lists is on
// docs/configuration.md, in a section whose heading names the command (in
// backticks): the commands are the cases of run's switch, so a new command
// or flag fails here until it is documented.
func TestFlagsDocumented(t *testing.T) {
	const page = "docs/configuration.md"
	src, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	cmds := runCommands(t)
	if len(cmds) < 10 {
		t.Fatalf("found %d commands in run's switch: %v", len(cmds), cmds)
	}
	for _, cmd := range cmds {
		flags := helpFlags(t, cmd)
		if len(flags) == 0 {
			continue // version takes none
		}
		section := commandSection(string(src), cmd)
		if section == "" {
			t.Errorf("%s has no section whose heading names `%s`; its flags: %v", page, cmd, flags)
			continue
		}
		for _, f := range flags {
			if !strings.Contains(section, "`--"+f+"`") {
				t.Errorf("%s: the section of `%s` does not document `--%s`", page, cmd, f)
			}
		}
	}
}

// runCommands returns the commands main.go's run dispatches on: the string
// cases of its switch, less help and the flag-like spellings.
func runCommands(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "run" {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			cc, ok := n.(*ast.CaseClause)
			if !ok {
				return true
			}
			for _, e := range cc.List {
				lit, ok := e.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				name, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				if name != "help" && !strings.HasPrefix(name, "-") {
					cmds = append(cmds, name)
				}
			}
			return true
		})
	}
	return cmds
}

var helpFlagLine = regexp.MustCompile(`(?m)^  --([a-z0-9-]+) \(`)

// helpFlags returns the flags "oncepay CMD --help" lists, with no
// environment but a --db in a temporary directory, so a command that opened
// its database anyway would leave nothing behind.
func helpFlags(t *testing.T, cmd string) []string {
	t.Helper()
	getenv := env(map[string]string{"ONCEPAY_DB": filepath.Join(t.TempDir(), "oncepay.db")})
	var stdout, stderr strings.Builder
	err := run(context.Background(), []string{cmd, "--help"}, getenv, &stdout, &stderr)
	if err == nil && !strings.Contains(stderr.String(), "--") {
		return nil // a command without flags ignores --help
	}
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("oncepay %s --help = %v, want flag.ErrHelp", cmd, err)
	}
	var flags []string
	for _, m := range helpFlagLine.FindAllStringSubmatch(stderr.String(), -1) {
		flags = append(flags, m[1])
	}
	if len(flags) == 0 {
		t.Fatalf("oncepay %s --help lists no flags:\n%s", cmd, stderr.String())
	}
	return flags
}

// commandSection returns the text of every section of the page whose
// heading names cmd in backticks, each up to the next heading of its level
// or above.
func commandSection(src, cmd string) string {
	lines := strings.Split(src, "\n")
	prose := proseLines(src)
	var b strings.Builder
	for i := 0; i < len(lines); i++ {
		level := headingLevel(prose[i])
		if level == 0 || !strings.Contains(lines[i], "`"+cmd+"`") {
			continue
		}
		for j := i; j < len(lines); j++ {
			if j > i {
				if l := headingLevel(prose[j]); l > 0 && l <= level {
					break
				}
			}
			b.WriteString(lines[j])
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// headingLevel is the level of an ATX heading line, 0 for any other line.
func headingLevel(line string) int {
	if !headingRe.MatchString(line) {
		return 0
	}
	trimmed := strings.TrimLeft(line, " ")
	return len(trimmed) - len(strings.TrimLeft(trimmed, "#"))
}
