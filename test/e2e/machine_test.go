package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"
)

// TestEveryTestSharesTheMachine: each test of the suite starts by saying how
// it shares the machine (parallel or exclusive; t.Parallel only for a test
// whose subtests do). A test that forgets runs in the serial phase before
// all the others, alone, and the suite's time grows by all of it.
func TestEveryTestSharesTheMachine(t *testing.T) {
	parallel(t)
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Name.Name == "TestMain" || len(fd.Name.Name) < 5 || fd.Name.Name[:4] != "Test" {
				continue
			}
			switch how := sharesMachine(fd.Body.List); {
			case how == "":
				t.Errorf("%s: %s does not start with parallel(t), exclusive(t) or t.Parallel()", fset.Position(fd.Pos()), fd.Name.Name)
			case how == "t.Parallel" && !runsSubtests(fd.Body):
				t.Errorf("%s: %s calls t.Parallel but runs no subtests: parallel(t) or exclusive(t) take the machine", fset.Position(fd.Pos()), fd.Name.Name)
			}
		}
	}
}

// sharesMachine names the call a test body starts with: "parallel",
// "exclusive", "t.Parallel", or "" for none of them.
func sharesMachine(body []ast.Stmt) string {
	if len(body) == 0 {
		return ""
	}
	es, ok := body[0].(*ast.ExprStmt)
	if !ok {
		return ""
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return ""
	}
	switch fn := call.Fun.(type) {
	case *ast.Ident:
		if fn.Name == "parallel" || fn.Name == "exclusive" {
			return fn.Name
		}
	case *ast.SelectorExpr:
		if fn.Sel.Name == "Parallel" {
			return "t.Parallel"
		}
	}
	return ""
}

// runsSubtests says whether body calls t.Run.
func runsSubtests(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Run" {
				found = true
			}
		}
		return !found
	})
	return found
}
