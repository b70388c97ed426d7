package haproxy

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestHAProxyAnswersStayHere: no non-test Go file outside this package names
// one of HAProxy's status or check-result words or sends a raw Runtime API
// command (Exec), so
// what HAProxy answers is read in one place. It type-checks the module's
// packages, so another package's Exec (database/sql's) is not mistaken for
// Client.Exec.
func TestHAProxyAnswersStayHere(t *testing.T) {
	t.Parallel() // its own HAProxy, state dir and ports
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the module's packages")
	}
	self := reflect.TypeFor[Client]().PkgPath()
	// Server statuses, and the check results of HAProxy 2.6 (check.c).
	words := []string{"UP", "DOWN", "MAINT", "NOLB", "DRAIN", "no check",
		"UNK", "INI", "SOCKERR", "L4OK", "L4TOUT", "L4CON", "L6OK", "L6TOUT", "L6RSP",
		"L7TOUT", "L7RSP", "L7OK", "L7OKC", "L7STS", "PROCERR", "PROCTOUT", "PROCOK"}

	// Export data of every dependency, for type-checking from source only
	// the module's own packages.
	export := map[string]string{}
	for _, line := range goList(t, "-deps", "-export", "-f", "{{.ImportPath}}\t{{.Export}}", "./...") {
		path, file, _ := strings.Cut(line, "\t")
		export[path] = file
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := export[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})

	checked := 0
	for _, line := range goList(t, "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \" \"}} {{join .CgoFiles \" \"}}", "./...") {
		f := strings.Split(line, "\t")
		path, dir, names := f[0], f[1], strings.Fields(f[2])
		if path == self || len(names) == 0 {
			continue
		}
		var files []*ast.File
		for _, name := range names {
			file, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, file)
		}
		info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
		conf := types.Config{Importer: imp, FakeImportC: true}
		if _, err := conf.Check(path, fset, files, info); err != nil {
			t.Fatalf("type-check %s: %v", path, err)
		}
		checked++
		for _, file := range files {
			ast.Inspect(file, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BasicLit:
					if n.Kind != token.STRING {
						break
					}
					s, err := strconv.Unquote(n.Value)
					if err == nil && slices.Contains(words, strings.TrimSpace(s)) {
						t.Errorf("%s: names HAProxy's status word %s: ask haproxy.Status or ServerStat instead", fset.Position(n.Pos()), n.Value)
					}
				case *ast.SelectorExpr:
					if obj := info.Uses[n.Sel]; obj != nil && obj.Pkg() != nil && obj.Pkg().Path() == self && obj.Name() == "Exec" {
						t.Errorf("%s: sends a raw Runtime API command: add a method to haproxy.Client instead", fset.Position(n.Pos()))
					}
				}
				return true
			})
		}
	}
	// Guard the guard: a listing that found nothing would pass.
	if checked < 10 {
		t.Fatalf("type-checked %d packages; the listing went wrong", checked)
	}
}

// goList runs `go list ARGS` at the module's root and returns its lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.Bytes())
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}
