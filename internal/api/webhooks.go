package api

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/shoal-lb/shoal/internal/jobrun"
)

// maxWebhookBody bounds an alert payload; Alertmanager groups many alerts in one.
const maxWebhookBody = 1 << 20

// maxListedErrors bounds the problems one error answer lists.
const maxListedErrors = 10

// Labels (or annotations) that route an alert to a scaling job.
const (
	labelGroup  = "shoal_group"
	labelAction = "shoal_action"
)

// WebhookResponse answers a webhook: what became of every alert, and the jobs
// made (one per group).
type WebhookResponse struct {
	Alerts []AlertResult `json:"alerts"`
	Jobs   []jobrun.Job  `json:"jobs"`
}

// AlertResult is what became of one alert of a webhook payload.
type AlertResult struct {
	// Index is the alert's position in the payload's alerts list.
	Index       int    `json:"index"`
	Alertname   string `json:"alertname,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Status      string `json:"status"`
	Group       string `json:"group,omitempty"`
	Action      string `json:"action,omitempty"`
	// Result is "accepted" (a job runs), or "ignored" with Reason.
	Result string `json:"result"`
	Reason string `json:"reason,omitempty"`
	// JobID is the job this alert's group got, accepted or ignored.
	JobID string `json:"job_id,omitempty"`
}

// webhookPayload is the part of Alertmanager's (version 4) and Grafana's
// unified alerting (version 1) webhook bodies that shoal reads; the two share
// this shape. Unknown fields are ignored: both grow new ones.
type webhookPayload struct {
	Version *string         `json:"version"`
	Alerts  *[]webhookAlert `json:"alerts"`
}

type webhookAlert struct {
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	Fingerprint string            `json:"fingerprint"`
}

// webhookKind names a webhook and the payload version it reads.
type webhookKind struct {
	name    string // source prefix and metrics label
	product string
	version string
}

var (
	alertmanagerHook = webhookKind{name: "alertmanager", product: "Alertmanager", version: "4"}
	grafanaHook      = webhookKind{name: "grafana", product: "Grafana unified alerting", version: "1"}
)

// action is a parsed shoal_action: up, down, plan:NAME or size:N.
type action struct {
	kind jobrun.Kind
	plan string
	size int
}

func (a action) String() string {
	switch a.kind {
	case jobrun.Plan:
		return "plan:" + a.plan
	case jobrun.Size:
		return "size:" + strconv.Itoa(a.size)
	}
	return string(a.kind)
}

const validActions = "up, down, plan:NAME or size:N"

func parseAction(s string) (action, error) {
	switch {
	case s == "up":
		return action{kind: jobrun.Up}, nil
	case s == "down":
		return action{kind: jobrun.Down}, nil
	case strings.HasPrefix(s, "plan:") && len(s) > len("plan:"):
		return action{kind: jobrun.Plan, plan: s[len("plan:"):]}, nil
	case strings.HasPrefix(s, "size:"):
		n, err := strconv.Atoi(s[len("size:"):])
		if err != nil {
			return action{}, fmt.Errorf("%s %q: size must be a whole number", labelAction, s)
		}
		return action{kind: jobrun.Size, size: n}, nil
	}
	return action{}, fmt.Errorf("unknown %s %q: must be %s", labelAction, s, validActions)
}

// webhookError is a payload refused as a whole.
type webhookError struct {
	code  int
	msg   string
	valid []string
}

// routedAlert is a firing alert addressed to a group, validated.
type routedAlert struct {
	index  int
	name   string
	act    action
	target int
}

// webhook turns the firing alerts of an alerting payload into jobs: one per
// group. The payload is validated as a whole before any job is submitted.
func (h *Handler) webhook(w http.ResponseWriter, r *http.Request, kind webhookKind) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, ErrorResponse{Error: fmt.Sprintf("method %s not allowed; the %s webhook takes POST", r.Method, kind.product)})
		return
	}
	if r.URL.Query().Has("token") {
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: "a token in the URL is not accepted (URLs end up in logs); send Authorization: Bearer TOKEN"})
		return
	}
	p, werr := decodePayload(w, r, kind)
	if werr == nil {
		var resp WebhookResponse
		resp, werr = h.applyAlerts(r, kind, *p.Alerts)
		if werr == nil {
			writeJSON(w, http.StatusOK, resp)
			return
		}
	}
	writeError(w, werr.code, ErrorResponse{Error: werr.msg, Valid: werr.valid})
}

func decodePayload(w http.ResponseWriter, r *http.Request, kind webhookKind) (webhookPayload, *webhookError) {
	var p webhookPayload
	tooLarge := &webhookError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("payload larger than %d bytes", maxWebhookBody)}
	if r.ContentLength > maxWebhookBody {
		return p, tooLarge
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxWebhookBody))
	err := dec.Decode(&p)
	if err == nil {
		// One JSON value and nothing after it.
		if _, terr := dec.Token(); terr == nil || errors.As(terr, new(*json.SyntaxError)) {
			err = errTrailing
		} else if !errors.Is(terr, io.EOF) {
			err = terr
		}
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return p, tooLarge
	case errors.Is(err, io.EOF):
		return p, &webhookError{code: http.StatusBadRequest, msg: "empty body; expected a " + kind.product + " webhook payload"}
	case err != nil:
		return p, &webhookError{code: http.StatusBadRequest, msg: "invalid JSON payload: " + err.Error()}
	case p.Alerts == nil:
		return p, &webhookError{code: http.StatusBadRequest, msg: fmt.Sprintf(`not a %s webhook payload: no "alerts" list`, kind.product)}
	case p.Version == nil || *p.Version != kind.version:
		got := "none"
		if p.Version != nil {
			got = strconv.Quote(*p.Version)
		}
		return p, &webhookError{code: http.StatusBadRequest, msg: fmt.Sprintf("unsupported %s payload version %s; shoal reads version %q", kind.product, got, kind.version)}
	}
	return p, nil
}

// applyAlerts validates every alert, then submits one job per group.
func (h *Handler) applyAlerts(r *http.Request, kind webhookKind, alerts []webhookAlert) (WebhookResponse, *webhookError) {
	resp := WebhookResponse{Alerts: make([]AlertResult, len(alerts)), Jobs: []jobrun.Job{}}
	byGroup := map[string][]routedAlert{}
	var errs []*webhookError
	for i, a := range alerts {
		res := &resp.Alerts[i]
		*res = AlertResult{Index: i, Alertname: a.Labels["alertname"], Fingerprint: a.Fingerprint, Status: a.Status}
		res.Group, res.Action = routing(a, labelGroup), routing(a, labelAction)
		switch a.Status {
		case "firing":
		case "resolved":
			res.Result, res.Reason = "ignored", "resolved alerts do not scale"
			continue
		default:
			errs = append(errs, &webhookError{code: http.StatusBadRequest, msg: fmt.Sprintf("%s: status must be firing or resolved, got %q", alertRef(i, res.Alertname), a.Status)})
			continue
		}
		if res.Group == "" && res.Action == "" {
			res.Result, res.Reason = "ignored", fmt.Sprintf("no %s and %s labels or annotations: not addressed to shoal", labelGroup, labelAction)
			continue
		}
		ra, werr := h.route(i, res.Alertname, res.Group, res.Action)
		if werr != nil {
			errs = append(errs, werr)
			continue
		}
		byGroup[res.Group] = append(byGroup[res.Group], ra)
	}
	if len(errs) > 0 {
		var msgs []string
		for _, e := range errs[:min(len(errs), maxListedErrors)] {
			msgs = append(msgs, e.msg)
		}
		if n := len(errs) - maxListedErrors; n > 0 {
			msgs = append(msgs, fmt.Sprintf("and %d more", n))
		}
		first := *errs[0]
		first.msg = strings.Join(msgs, "; ")
		return resp, &first
	}

	names := make([]string, 0, len(byGroup))
	for name := range byGroup {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		routed := byGroup[name]
		// The largest target wins (a scale-out beats a scale-in); ties go to
		// the action that sorts first, so the choice never depends on order.
		win := slices.MinFunc(routed, func(a, b routedAlert) int {
			return cmp.Or(cmp.Compare(b.target, a.target), strings.Compare(a.act.String(), b.act.String()), cmp.Compare(a.index, b.index))
		})
		req := jobrun.Request{Group: name, Kind: win.act.kind, Plan: win.act.plan, Size: win.act.size, Source: jobSource(kind.name, win.name)}
		job, err := h.jobs.Submit(r.Context(), req)
		var inErr *jobrun.InputError
		switch {
		case errors.As(err, &inErr):
			// route ran the same checks: only if they drifted apart.
			return resp, &webhookError{code: http.StatusUnprocessableEntity, msg: inErr.Msg, valid: inErr.Valid}
		case err != nil:
			// The store failed; jobs already submitted for other groups stand.
			h.log.Error("webhook job submission failed", "webhook", kind.name, "group", name, "err", err)
			return resp, &webhookError{code: http.StatusInternalServerError, msg: err.Error()}
		}
		resp.Jobs = append(resp.Jobs, job)
		for _, ra := range routed {
			res := &resp.Alerts[ra.index]
			res.JobID = job.ID
			switch {
			case ra.act != win.act:
				res.Result = "ignored"
				res.Reason = fmt.Sprintf("superseded by %s (%s, target %d) for group %s in the same payload: the largest scale-out wins", alertRef(win.index, win.name), win.act, win.target, name)
			case job.State == jobrun.Ignored:
				res.Result, res.Reason = "ignored", job.Reason
			default:
				res.Result = string(job.State)
			}
		}
	}
	h.logWebhook(kind, resp)
	return resp, nil
}

// route validates one firing alert addressed to shoal.
func (h *Handler) route(i int, alertname, groupName, act string) (routedAlert, *webhookError) {
	ref := alertRef(i, alertname)
	switch {
	case groupName == "":
		return routedAlert{}, &webhookError{code: http.StatusUnprocessableEntity, msg: fmt.Sprintf("%s: has %s %q but no %s", ref, labelAction, act, labelGroup)}
	case act == "":
		return routedAlert{}, &webhookError{code: http.StatusUnprocessableEntity, msg: fmt.Sprintf("%s: has %s %q but no %s (%s)", ref, labelGroup, groupName, labelAction, validActions)}
	}
	g, ok := h.groups.Group(groupName)
	if !ok {
		return routedAlert{}, &webhookError{code: http.StatusNotFound, msg: fmt.Sprintf("%s: unknown group %q", ref, groupName), valid: h.groups.Names()}
	}
	a, err := parseAction(act)
	if err != nil {
		return routedAlert{}, &webhookError{code: http.StatusUnprocessableEntity, msg: fmt.Sprintf("%s: %v", ref, err)}
	}
	target, err := jobrun.Target(g, jobrun.Request{Group: groupName, Kind: a.kind, Plan: a.plan, Size: a.size})
	if err != nil {
		werr := &webhookError{code: http.StatusUnprocessableEntity, msg: ref + ": " + err.Error()}
		var inErr *jobrun.InputError
		if errors.As(err, &inErr) {
			werr.valid = inErr.Valid
		}
		return routedAlert{}, werr
	}
	return routedAlert{index: i, name: alertname, act: a, target: target}, nil
}

// routing reads a routing key from the alert's labels, then its annotations.
func routing(a webhookAlert, key string) string {
	if v := strings.TrimSpace(a.Labels[key]); v != "" {
		return v
	}
	return strings.TrimSpace(a.Annotations[key])
}

func alertRef(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("alert %d", i)
	}
	return fmt.Sprintf("alert %d (%s)", i, name)
}

// jobSource is "WEBHOOK:ALERTNAME", made printable and cut to the length a
// job's source may have.
func jobSource(webhook, alertname string) string {
	s := webhook
	if alertname != "" {
		s += ":" + strings.Map(func(r rune) rune {
			if unicode.IsControl(r) || r == utf8.RuneError {
				return '?'
			}
			return r
		}, alertname)
	}
	for len(s) > jobrun.MaxSource {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

func (h *Handler) logWebhook(kind webhookKind, resp WebhookResponse) {
	counts := map[string]int{}
	for _, a := range resp.Alerts {
		var result string
		switch {
		case a.Status == "resolved":
			result = "resolved"
		case a.Group == "":
			result = "unlabelled"
		case strings.HasPrefix(a.Reason, "superseded"):
			result = "superseded"
		default:
			result = "job"
		}
		counts[result]++
		if h.metrics != nil {
			h.metrics.ObserveWebhookAlert(kind.name, result)
		}
	}
	ids := make([]string, len(resp.Jobs))
	for i, j := range resp.Jobs {
		ids[i] = j.ID
	}
	h.log.Info("webhook alerts", "webhook", kind.name, "alerts", len(resp.Alerts), "jobs", strings.Join(ids, ","),
		"resolved", counts["resolved"], "unlabelled", counts["unlabelled"], "superseded", counts["superseded"])
}
