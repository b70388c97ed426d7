package config

import (
	"errors"
	"testing"
	"time"
)

func TestPredictive(t *testing.T) {
	cfg, err := Parse("shoal.yaml", []byte(autoscaleDoc(`      target: {metric: cpu.p90, value: 60}
      predictive: {lookback: 3d, horizon: 15m, mode: forecast_and_scale, capacity: 120}
`)))
	if err != nil {
		t.Fatal(err)
	}
	got := *cfg.Groups[0].Autoscale.Predictive
	want := Predictive{Lookback: 72 * time.Hour, Horizon: 15 * time.Minute, Mode: PredictiveScale, Capacity: 120}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	cfg, err = Parse("shoal.yaml", []byte(autoscaleDoc(`      target: {metric: cpu.p90, value: 60}
      predictive: {}
`)))
	if err != nil {
		t.Fatal(err)
	}
	got = *cfg.Groups[0].Autoscale.Predictive
	want = Predictive{Lookback: 7 * 24 * time.Hour, Horizon: 10 * time.Minute, Mode: PredictiveForecastOnly}
	if got != want {
		t.Errorf("defaults: got %+v, want %+v", got, want)
	}
}

func TestPredictiveErrors(t *testing.T) {
	tests := []struct{ body, want string }{
		{`      predictive: {lookback: 36h}
`, `shoal.yaml:9:30: groups[0].autoscale.predictive.lookback: must be a whole number of days such as "7d" (or hours that make whole days, "168h"), got "36h"`},
		{`      predictive: {lookback: 0d}
`, `shoal.yaml:9:30: groups[0].autoscale.predictive.lookback: must be from 1d to 30d, got 0d`},
		{`      predictive: {horizon: 30s}
`, `shoal.yaml:9:29: groups[0].autoscale.predictive.horizon: must be whole minutes from 1m to 24h (the forecast is per minute), got 30s`},
		{`      predictive: {mode: scale}
`, `shoal.yaml:9:26: groups[0].autoscale.predictive.mode: must be forecast_only or forecast_and_scale, got "scale"`},
		{`      predictive: {capacity: -3}
`, `shoal.yaml:9:30: groups[0].autoscale.predictive.capacity: must be > 0 requests per second per instance, got -3`},
		{`      predictive: {window: 7d}
`, ``},
	}
	for _, tt := range tests {
		_, err := Parse("shoal.yaml", []byte(autoscaleDoc(tt.body)))
		var list ErrorList
		if !errors.As(err, &list) || len(list) == 0 {
			t.Errorf("%q: got %v, want a config error", tt.body, err)
			continue
		}
		if tt.want != "" && list[0].Error() != tt.want {
			t.Errorf("%q:\n got %s\nwant %s", tt.body, list[0].Error(), tt.want)
		}
	}
}
