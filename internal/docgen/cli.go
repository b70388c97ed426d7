package docgen

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// cliReference is docs/cli.md: every command of root that is not hidden,
// depth first in the order `shoal help` lists them, with its usage, what it
// does, its examples and its own flags; the global flags once, at the top.
func cliReference(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString(`# Command-line reference

<!-- Generated from the command tree in internal/cli by make docs.
     Do not edit; TestDocsUpToDate fails when this file is stale. -->

Every ` + "`shoal`" + ` command, as ` + "`shoal help COMMAND`" + ` shows it. The exit status is 0 when
the command did what it was asked, 1 when it failed (a job failed, the core is
unreachable), 2 for bad input (an invalid config, an unknown group or plan, bad
flags) and 3 when a job was ignored.

## Global flags

Every command takes these:

` + "```\n" + root.PersistentFlags().FlagUsagesWrapped(0) + "```\n")
	var toc, body strings.Builder
	var walk func(c *cobra.Command, depth int)
	walk = func(c *cobra.Command, depth int) {
		for _, sub := range c.Commands() {
			if sub.Hidden || !sub.IsAvailableCommand() && sub.Name() != "help" {
				continue
			}
			writeCommand(&toc, &body, sub, depth)
			walk(sub, depth+1)
		}
	}
	walk(root, 0)
	b.WriteString("\n## Commands\n\n")
	b.WriteString(toc.String())
	b.WriteString(body.String())
	return b.String()
}

// writeCommand adds c's line to toc and its section to body.
func writeCommand(toc, body *strings.Builder, c *cobra.Command, depth int) {
	path := c.CommandPath()
	anchor := strings.ReplaceAll(path, " ", "-")
	fmt.Fprintf(toc, "%s- [`%s`](#%s): %s\n", strings.Repeat("  ", depth), path, anchor, c.Short)
	fmt.Fprintf(body, "\n### %s\n\n", path)
	long := strings.TrimSpace(c.Long)
	if long == "" {
		long = c.Short
	}
	fmt.Fprintf(body, "%s\n\n```\n%s\n```\n", long, c.UseLine())
	if len(c.Aliases) > 0 {
		fmt.Fprintf(body, "\nAliases: %s\n", strings.Join(c.Aliases, ", "))
	}
	if ex := strings.TrimRight(c.Example, "\n"); ex != "" {
		fmt.Fprintf(body, "\nExamples:\n\n```\n%s\n```\n", ex)
	}
	if fl := c.NonInheritedFlags(); fl.HasAvailableFlags() {
		fmt.Fprintf(body, "\nFlags:\n\n```\n%s```\n", fl.FlagUsagesWrapped(0))
	}
}
