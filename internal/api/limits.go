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

// Measured is bench/results/20261206-192618-scale.md, the 1,000 instances
// of `shoal-bench scale -sizes 1000` (2026-12-06, 2 cores shared with other
// work; commit c3883f2, HAProxy's shared stats answer at most 200 ms old).
var Measured = MeasuredLimits{
	Instances: 1000, Groups: 50, Report: "bench/results/20261206-192618-scale.md",
	Figures: []LimitFigure{
		{"shoal CPU at rest (1 s metrics)", "7.4 % of a core (0.37 % with no instance)", "< 10 % of a core"},
		{"shoal RSS at rest", "273 MiB", "< 300 MB"},
		{"restart (kill -9) to every instance adopted", "2.3 s", "< 15 s"},
		{"metrics.db with the default retention (30 days)", "695 MiB (the retention's 18 million rows)", "≤ 1 GB"},
		{"shoal status", "133 ms (the API's answer 23 ms)", "< 200 ms"},
		{"shoal events", "53 ms (the API's answer 23 ms)", "< 200 ms"},
		{"GET /metrics", "28 ms", "< 200 ms"},
		{"dashboard stream, first message", "83 ms", "< 200 ms"},
	},
}
