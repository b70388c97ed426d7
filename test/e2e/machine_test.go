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
			if len(fd.Body.List) == 0 || !sharesMachine(fd.Body.List[0]) {
				t.Errorf("%s: %s does not start with parallel(t), exclusive(t) or t.Parallel()", fset.Position(fd.Pos()), fd.Name.Name)
			}
		}
	}
}

func sharesMachine(s ast.Stmt) bool {
	es, ok := s.(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	switch fn := call.Fun.(type) {
	case *ast.Ident:
		return fn.Name == "parallel" || fn.Name == "exclusive"
	case *ast.SelectorExpr:
		return fn.Sel.Name == "Parallel"
	}
	return false
}
