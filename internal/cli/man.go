package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// manCmd writes a man page per command of root (hidden: `make man` runs it).
func manCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:     "man DIR",
		Short:   "write shoal's man pages (section 1) into DIR",
		Example: "  shoal man build/man && man -l build/man/shoal-scale.1",
		Hidden:  true,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			root.DisableAutoGenTag = true // the pages of one commit stay the same
			header := &doc.GenManHeader{Title: "SHOAL", Section: "1", Source: "shoal", Manual: "shoal manual"}
			if err := doc.GenManTree(root, header, args[0]); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			return nil
		},
	}
}
