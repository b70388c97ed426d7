// Package docgen writes the reference pages of docs/ from what they
// describe: the config file from config's types, defaults and registered
// providers; the command line from cli's command tree; the metrics from the
// collectors serve registers. `make docs` runs it (cmd/shoal-docs), and
// TestDocsUpToDate fails when a committed page is stale.
package docgen

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/shoal-lb/shoal/internal/cli"
	// Every provider type registers its keys from its package.
	_ "github.com/shoal-lb/shoal/internal/provider/all"
)

// A Page is one generated file, at Path below the repository's root.
type Page struct {
	Path string // slash-separated, as docs/config.md
	Data []byte
}

// Pages generates every page. root is the repository, whose source the
// config reference reads for the doc comments of its types.
func Pages(root string) ([]Page, error) {
	schema, rows, err := configSchema(root)
	if err != nil {
		return nil, fmt.Errorf("config schema: %w", err)
	}
	schemaJSON, err := renderSchema(schema)
	if err != nil {
		return nil, err
	}
	metrics, err := metricsReference()
	if err != nil {
		return nil, fmt.Errorf("metrics reference: %w", err)
	}
	return []Page{
		{"docs/config.md", []byte(renderReference(rows))},
		{"docs/config-defaults.md", []byte(renderDefaults())},
		{"docs/shoal.schema.json", schemaJSON},
		{"docs/cli.md", []byte(cliReference(cli.Root()))},
		{"docs/metrics.md", []byte(metrics)},
	}, nil
}

// Write writes every page below root.
func Write(root string) error {
	pages, err := Pages(root)
	if err != nil {
		return err
	}
	for _, p := range pages {
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(p.Path)), p.Data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p.Path, err)
		}
	}
	return nil
}

// Stale returns the pages whose file below root is missing or differs from
// what Pages generates.
func Stale(root string) ([]string, error) {
	pages, err := Pages(root)
	if err != nil {
		return nil, err
	}
	var stale []string
	for _, p := range pages {
		old, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p.Path)))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read %s: %w", p.Path, err)
		}
		if !bytes.Equal(old, p.Data) {
			stale = append(stale, p.Path)
		}
	}
	return stale, nil
}
