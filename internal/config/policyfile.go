package config

import (
	"bytes"
	"cmp"
	"errors"
	"io"
	"slices"
	"time"

	"gopkg.in/yaml.v3"
)

// ParseAutoscale validates data as a candidate autoscale policy for group g
// (as `shoal policy test --policy FILE` sends it): the mapping that goes under
// the group's `autoscale:`, or a mapping whose only key is `autoscale`.
// metricsInterval is the running config's metrics.interval. Problems are an
// ErrorList naming path, like Load's. Empty data yields nil: no candidate.
func ParseAutoscale(path string, data []byte, g Group, metricsInterval time.Duration) (*Autoscale, error) {
	d := &decoder{file: path, budget: 1000 + 2*len(data), metricsInterval: metricsInterval}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		d.syntaxError(err)
		return nil, d.errs
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.errorf(&extra, "", "unexpected second YAML document; a policy file holds one")
	} else if !errors.Is(err, io.EOF) {
		d.syntaxError(err)
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		d.errorf(root, "", "a policy must be a mapping with rules, a target or a schedule, got %s", describe(root))
		return nil, d.errs
	}
	if len(root.Content) == 2 && root.Content[0].Value == "autoscale" {
		root = root.Content[1]
	}
	a := d.autoscale(root, "autoscale", &g, true)
	if len(d.errs) > 0 {
		slices.SortStableFunc(d.errs, func(a, b *Error) int {
			return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
		})
		return nil, d.errs
	}
	return a, nil
}
