package api

// MeasuredLimits is the largest fleet shoal was measured at and what it
// cost there (`shoal-bench scale`, bench/results/scale.md): `shoal status`
// shows it, so an operator sees how far the figures reach. Update it with
// the report.
type MeasuredLimits struct {
	Instances int           `json:"instances"`
	Groups    int           `json:"groups"`
	Figures   []LimitFigure `json:"figures"`
	Report    string        `json:"report"`
}

// LimitFigure is one measured figure beside its goal.
type LimitFigure struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Goal  string `json:"goal"`
}

// Measured is the largest size of bench/results/scale.md (2026-12-06,
// 2 cores shared with other work; commit 3fddc0f).
var Measured = MeasuredLimits{
	Instances: 1000, Groups: 50, Report: "bench/results/scale.md",
	Figures: []LimitFigure{
		{"shoal CPU at rest (1 s metrics)", "9.1 % of a core (0.33 % with no instance)", "< 10 % of a core"},
		{"shoal RSS at rest", "269 MiB", "< 300 MB"},
		{"restart (kill -9) to every instance adopted", "1.1 s", "< 15 s"},
		{"metrics.db with the default retention (30 days)", "767 MiB (the retention's 18 million rows)", "≤ 1 GB"},
		{"shoal status", "72 ms (the API's answer 9 ms)", "< 200 ms"},
		{"shoal events", "51 ms (the API's answer 9 ms)", "< 200 ms"},
		{"GET /metrics", "13 ms", "< 200 ms"},
		{"dashboard stream, first message", "50 ms", "< 200 ms"},
	},
}
