package model

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestStepTableMatchesCode keeps each model beside the code: every row of
// the step table in its header names a Go function or constant that must
// still exist and still contain the statement the step stands for, and
// every step is tagged in the model.
func TestStepTableMatchesCode(t *testing.T) {
	src := newGoSource("..")
	for _, m := range []struct {
		file    string
		minRows int // the whole flow
	}{{modelFile, 20}, {refundsFile, 20}, {forwardFile, 20}, {deliverFile, 20}} {
		t.Run(m.file, func(t *testing.T) {
			rows, body, err := readStepTable(m.file)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) < m.minRows {
				t.Fatalf("step table has %d rows, want the whole flow (%d or more)", len(rows), m.minRows)
			}
			steps := map[string]bool{}
			for _, r := range rows {
				steps[r.step] = true
				if err := src.check(r.ref, r.needle); err != nil {
					t.Errorf("%s:%d: step %q: %v; the code changed, so change the model with it", m.file, r.line, r.step, err)
				}
			}
			tags := modelTags(body)
			for step := range steps {
				if !tags[step] {
					t.Errorf("step %q is in the table but no [%s] tag marks it in the model", step, step)
				}
			}
			for tag := range tags {
				if !steps[tag] {
					t.Errorf("the model tags [%s], a step missing from the table", tag)
				}
			}
		})
	}
}

// TestStepTableCatchesDrift shows the check fails when a mapped function is
// renamed or a mapped statement loses the guard the model relies on.
func TestStepTableCatchesDrift(t *testing.T) {
	src := newGoSource("..")
	for _, tc := range []struct {
		ref, needle string
		ok          bool
	}{
		{"payment.(*Service).own", "s.Store.Record(ctx, a.Kind, a.Scope, a.Key, a.Fence", true},
		{"payment.(payments).move", "DownstreamKey(a.Scope, a.Key)", true},
		{"sqlitestore.recordSQL", "status = 'in_progress' AND fence = ?", true},
		{"payment.DownstreamKey", "h.Write([]byte(key))", true},
		{"sqlitestore.createRefund", "AND amount - amount_refunded - amount_reserved >= ?1", true},
		{"payment.(refunds).move", "RefundDownstreamKey(a.Scope, a.Key)", true},
		{"sqlitestore.createRefund", "WHERE id = ?3 AND scope = ?4 AND amount_reserved = 0", false}, // guard not there
		{"payment.(*refunds).move", "RefundDownstreamKey(", false},                                  // wrong receiver
		{"payment.(*Service).ownOnce", "s.Store.Record(", false},                                    // renamed
		{"payment.(Service).own", "s.Store.Record(", false},                                         // wrong receiver
		{"payment.(*payments).move", "DownstreamKey(", false},                                       // wrong receiver
		{"payment.(*Service).own", "s.Store.Record(ctx, a.Kind, a.Scope, 0", false},                 // other statement
		{"sqlitestore.recordSQL", "AND fence = ? AND lease_expires_at", false},                      // guard not there
		{"sqlitestore.noSuchSQL", "UPDATE", false},
		{"nosuchpkg.Func", "x", false},
	} {
		err := src.check(tc.ref, tc.needle)
		if (err == nil) != tc.ok {
			t.Errorf("check(%q, %q) = %v, want ok = %v", tc.ref, tc.needle, err, tc.ok)
		}
	}
}

// stepRow is one row of the table: a model step, the Go it stands for,
// and text that Go must contain.
type stepRow struct {
	step, ref, needle string
	line              int
}

var rowRE = regexp.MustCompile(`^\s*\*\s*\|([^|]+)\|([^|]+)\|([^|]+)\|\s*$`)

// readStepTable returns the table rows of the model's header comment and
// the model after that comment.
func readStepTable(path string) ([]stepRow, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	text := string(b)
	end := strings.Index(text, "*/")
	if end < 0 {
		return nil, "", fmt.Errorf("%s: no header comment", path)
	}
	var rows []stepRow
	for i, line := range strings.Split(text[:end], "\n") {
		m := rowRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		step, ref, needle := strings.TrimSpace(m[1]), strings.TrimSpace(m[2]), strings.TrimSpace(m[3])
		if step == "step" || strings.Trim(step, "-") == "" {
			continue // the heading and its rule
		}
		rows = append(rows, stepRow{step: step, ref: ref, needle: needle, line: i + 1})
	}
	return rows, text[end+2:], nil
}

var (
	commentRE = regexp.MustCompile(`(?s)/\*.*?\*/`)
	tagRE     = regexp.MustCompile(`\[([a-z]+(?:-[a-z]+)*)\]`)
)

// modelTags returns the [step] tags in the comments of the model's body.
func modelTags(body string) map[string]bool {
	tags := map[string]bool{}
	for _, c := range commentRE.FindAllString(body, -1) {
		for _, m := range tagRE.FindAllStringSubmatch(c, -1) {
			tags[m[1]] = true
		}
	}
	return tags
}

// goSource finds functions, methods and constants in the module's
// packages by package name.
type goSource struct {
	root string
	pkgs map[string][]goFile // by package name, loaded once
	dirs map[string][]string // the directories of each package name
	err  error
}

type goFile struct {
	fset *token.FileSet
	file *ast.File
	src  []byte
}

func newGoSource(root string) *goSource { return &goSource{root: root} }

func (g *goSource) load() error {
	if g.pkgs != nil || g.err != nil {
		return g.err
	}
	g.pkgs, g.dirs = map[string][]goFile{}, map[string][]string{}
	g.err = filepath.WalkDir(g.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != g.root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		name, dir := f.Name.Name, filepath.Dir(path)
		if !slices.Contains(g.dirs[name], dir) {
			g.dirs[name] = append(g.dirs[name], dir)
		}
		g.pkgs[name] = append(g.pkgs[name], goFile{fset, f, src})
		return nil
	})
	return g.err
}

var refRE = regexp.MustCompile(`^(\w+)\.(?:\((\*?)(\w+)\)\.)?(\w+)$`)

// check reports whether ref (pkg.Func, pkg.(*T).Method, pkg.(T).Method or
// pkg.Const) exists and its source, or a constant's string value, contains
// needle; runs of white space count as one space.
func (g *goSource) check(ref, needle string) error {
	if err := g.load(); err != nil {
		return err
	}
	m := refRE.FindStringSubmatch(ref)
	if m == nil {
		return fmt.Errorf("%q is not pkg.Name, pkg.(*T).Method or pkg.(T).Method", ref)
	}
	pkg, star, recv, name := m[1], m[2] == "*", m[3], m[4]
	files, ok := g.pkgs[pkg]
	if !ok {
		return fmt.Errorf("no package %s in the module", pkg)
	}
	if dirs := g.dirs[pkg]; len(dirs) > 1 {
		return fmt.Errorf("package name %s is in %s: the table cannot tell them apart", pkg, strings.Join(dirs, " and "))
	}
	text, found := "", false
	for _, f := range files {
		for _, d := range f.file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.Name == name && receiverIs(d, star, recv) {
					text, found = string(f.src[f.fset.Position(d.Pos()).Offset:f.fset.Position(d.End()).Offset]), true
				}
			case *ast.GenDecl:
				if recv != "" || (d.Tok != token.CONST && d.Tok != token.VAR) {
					continue
				}
				for _, s := range d.Specs {
					vs := s.(*ast.ValueSpec)
					for i, id := range vs.Names {
						if id.Name == name && i < len(vs.Values) {
							text, found = stringValue(vs.Values[i]), true
						}
					}
				}
			}
		}
	}
	if !found {
		return fmt.Errorf("%s is gone from package %s", ref, pkg)
	}
	if !strings.Contains(squeeze(text), squeeze(needle)) {
		return fmt.Errorf("%s no longer contains %q", ref, needle)
	}
	return nil
}

// receiverIs reports whether d has the receiver (*recv or recv), or none
// when recv is empty.
func receiverIs(d *ast.FuncDecl, star bool, recv string) bool {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return recv == ""
	}
	typ := d.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		if !star {
			return false
		}
		typ = s.X
	} else if star {
		return false
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.Name == recv
}

// stringValue returns the string literals of a constant's expression,
// joined; other operands (another constant) stand as their names.
func stringValue(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.BasicLit:
		if s, err := strconv.Unquote(e.Value); err == nil {
			return s
		}
		return e.Value
	case *ast.BinaryExpr:
		return stringValue(e.X) + stringValue(e.Y)
	case *ast.ParenExpr:
		return stringValue(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

func squeeze(s string) string { return strings.Join(strings.Fields(s), " ") }
