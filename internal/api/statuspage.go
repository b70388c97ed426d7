package api

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/group"
)

// StatusFormats are the formats of the status page (GET /status?format=F)
// and of `shoal status -o F` besides its table.
var StatusFormats = []string{"html", "csv", "json"}

// WriteStatus writes s in format (one of StatusFormats) as of now.
func WriteStatus(w io.Writer, format string, s StatusResponse, now time.Time) error {
	switch format {
	case "html":
		return statusHTML.Execute(w, statusPage{StatusResponse: s, Now: now})
	case "csv":
		return writeStatusCSV(w, s)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	return fmt.Errorf("unknown status format %q; valid: %s", format, strings.Join(StatusFormats, ", "))
}

// statusContentTypes are the page's media types by format.
var statusContentTypes = map[string]string{
	"html": "text/html; charset=utf-8",
	"csv":  "text/csv; charset=utf-8",
	"json": "application/json",
}

// statusPage serves GET /status: every instance with its last check, like
// Tengine's check_status page, as HTML (default), CSV or JSON.
func (h *Handler) statusPage(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	if format == "" {
		format = "html"
	}
	ct, ok := statusContentTypes[format]
	if !ok {
		writeError(w, http.StatusBadRequest, ErrorResponse{
			Error: fmt.Sprintf("format must be one of %s, got %q", strings.Join(StatusFormats, ", "), truncate(format)),
			Valid: StatusFormats,
		})
		return
	}
	s := h.collectStatus(r.Context())
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// The page needs its inline style and nothing else.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.Header().Set("Cache-Control", "no-store")
	if err := WriteStatus(w, format, s, time.Now()); err != nil {
		h.log.Warn("write status page", "err", err)
	}
}

func (h *Handler) collectStatus(ctx context.Context) StatusResponse {
	resp := StatusResponse{Groups: []group.Status{}}
	for _, g := range h.groups.All() {
		resp.Groups = append(resp.Groups, g.Status(ctx))
	}
	if h.providers != nil {
		resp.Hosts = h.providers.Hosts()
	}
	resp.RateLimited = h.limitedClients(ctx)
	resp.MeasuredLimits = &Measured
	return resp
}

// StatusCSVHeader names the columns of the CSV status: one row per instance.
var StatusCSVHeader = []string{"group", "instance", "addr", "state", "health", "check", "check_code",
	"check_duration_ms", "check_desc", "check_reason", "last_change", "sessions", "requests", "pid", "started_at", "version", "cloud_id"}

func writeStatusCSV(w io.Writer, s StatusResponse) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(StatusCSVHeader); err != nil {
		return err
	}
	for _, g := range s.Groups {
		for _, in := range g.Instances {
			err := cw.Write([]string{g.Name, in.Name, in.Addr, string(in.State), string(in.Health), in.Check,
				optInt(int64(in.CheckCode)), optInt(in.CheckDurationMS), in.CheckDesc, in.CheckReason,
				optTime(in.LastChange), strconv.Itoa(in.Sessions), strconv.FormatInt(in.Requests, 10),
				strconv.Itoa(in.PID), optTime(&in.StartedAt), in.Version, in.CloudID})
			if err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

func optInt(v int64) string {
	if v == 0 {
		return ""
	}
	return strconv.FormatInt(v, 10)
}

func optTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

type statusPage struct {
	StatusResponse
	Now time.Time
}

// Instances counts every group's instances.
func (p statusPage) Instances() int {
	n := 0
	for _, g := range p.Groups {
		n += len(g.Instances)
	}
	return n
}

// statusHTML escapes every value through html/template.
var statusHTML = template.Must(template.New("status").Funcs(template.FuncMap{
	"up": func(in group.InstanceStatus) bool {
		return in.Health.IsUp() && in.State == group.InService
	},
	"ago": func(now time.Time, t *time.Time) string {
		if t == nil || t.IsZero() {
			return "-"
		}
		return now.Sub(*t).Round(time.Second).String() + " ago"
	},
	"rfc3339": func(t *time.Time) string { return optTime(t) },
	"code":    func(v int) string { return optInt(int64(v)) },
	"ms": func(v int64) string {
		if v == 0 {
			return ""
		}
		return strconv.FormatInt(v, 10) + "ms"
	},
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>shoal status</title>
<style>
body { font-family: sans-serif; margin: 1em 2em; }
table { border-collapse: collapse; margin-bottom: 1em; }
th, td { border: 1px solid #999; padding: 0.2em 0.6em; text-align: left; }
th { background: #eee; }
tr.down td { background: #f99; }
.error { color: #a00; }
</style>
</head>
<body>
<h1>shoal instance check status</h1>
<p>Groups: {{len .Groups}}, instances: {{.Instances}}, at {{.Now.UTC.Format "2006-01-02T15:04:05Z07:00"}}</p>
{{- range .Groups}}
<h2>Group {{.Name}}</h2>
<p>plan {{if .Plan}}{{.Plan}}{{else}}-{{end}}, desired {{.Desired}}, in service {{.InService}} (min {{.MinSize}}, max {{.MaxSize}})</p>
{{- if .HAProxyError}}
<p class="error">haproxy: {{.HAProxyError}}</p>
{{- end}}
<table>
<thead><tr><th>Name</th><th>Address</th><th>State</th><th>Health</th><th>Check</th><th>Code</th><th>Duration</th><th>Description</th><th>Reason</th><th>Last change</th><th>Sessions</th><th>Requests</th><th>PID</th><th>Version</th><th>Cloud ID</th></tr></thead>
<tbody>
{{- range .Instances}}
<tr{{if not (up .)}} class="down"{{end}}><td>{{.Name}}</td><td>{{.Addr}}</td><td>{{.State}}</td><td>{{.Health}}</td><td>{{.Check}}</td><td>{{code .CheckCode}}</td><td>{{ms .CheckDurationMS}}</td><td>{{.CheckDesc}}</td><td>{{.CheckReason}}</td><td title="{{rfc3339 .LastChange}}">{{ago $.Now .LastChange}}</td><td>{{.Sessions}}</td><td>{{.Requests}}</td><td>{{.PID}}</td><td>{{.Version}}</td><td>{{.CloudID}}</td></tr>
{{- end}}
</tbody>
</table>
{{- range .Instances}}{{if .Waiting}}
<p>retiring {{.Name}}, still in service: {{.Waiting}}</p>
{{- end}}{{end}}
{{- range .LastFailures}}
<p class="error">failed {{.Instance}} at {{.At.UTC.Format "2006-01-02T15:04:05Z07:00"}}: {{.Reason}}</p>
{{- end}}
{{- end}}
</body>
</html>
`))
