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

// Measured is the last scale report's largest size.
var Measured = MeasuredLimits{
	Instances: 1000, Groups: 50, Report: "bench/results/scale.md",
	Figures: []LimitFigure{
		{"shoal CPU at rest (1 s metrics)", "TBD", "< 10 % of a core"},
		{"shoal RSS at rest", "TBD", "< 300 MB"},
		{"restart (kill -9) to every instance adopted", "TBD", "< 15 s"},
		{"metrics.db with the default retention (30 days)", "TBD", "≤ 1 GB"},
		{"shoal status", "TBD", "< 200 ms"},
		{"shoal events", "TBD", "< 200 ms"},
		{"GET /metrics", "TBD", "< 200 ms"},
		{"dashboard stream, first message", "TBD", "< 200 ms"},
	},
}
