package config

import (
	"strings"
	"testing"
)

// TestWakingPage: scale_to_zero.waking_page is off unless set, and takes
// only a boolean, refused at its position.
func TestWakingPage(t *testing.T) {
	for _, tc := range []struct {
		line string
		want bool
	}{{"    scale_to_zero: {}\n", false}, {"    scale_to_zero: {waking_page: true}\n", true}} {
		cfg, err := Parse("shoal.yaml", []byte(zeroDoc(tc.line, "")))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Groups[0].ScaleToZero.WakingPage; got != tc.want {
			t.Errorf("%q: waking_page %v, want %v", tc.line, got, tc.want)
		}
	}
	_, err := Parse("shoal.yaml", []byte(zeroDoc("    scale_to_zero: {waking_page: sometimes}\n", "")))
	if err == nil || !strings.Contains(err.Error(), "shoal.yaml:7:34: groups[0].scale_to_zero.waking_page:") {
		t.Errorf("error = %v", err)
	}
}
