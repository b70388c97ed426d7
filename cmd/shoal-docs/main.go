// Command shoal-docs writes the generated reference pages of docs/ (the
// config, the command line, the metrics); `make docs` runs it from the
// repository's root. See internal/docgen.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/shoal-lb/shoal/internal/docgen"
)

func main() {
	root := flag.String("root", ".", "the repository's root, where docs/ is")
	flag.Parse()
	if err := docgen.Write(*root); err != nil {
		fmt.Fprintln(os.Stderr, "shoal-docs:", err)
		os.Exit(1)
	}
}
