package group

import (
	"encoding/json"
	"log/slog"
	"maps"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/store"
)

// deployState owns a group's templates: the one configured, the one
// serving, and the one a running deploy rolls. Where each comes from and
// what moves it (Deploy runs the roll):
//
//	config reload ──setBase──► configured (base) + deployed vars ═► next
//	                                                                 │ shoal deploy
//	                                                                 ▼
//	+-------------------+  begin(T)  +-----------------------+  serve(T)  +------------+
//	| serving S,        |----------->| serving S, rolling T: |----------->| serving T, |
//	| no roll: launches |            | launches start T,     |  (deploy   | vars of T  |
//	| start S           |<-----------| surge beyond desired  |  succeeded)| (stored)   |
//	+-------------------+   end()    +-----------------------+            +------------+
//	                     (failed, interrupted; a rollback is a roll to S)
//
// The serving template is stored with the group's state (stored) and
// changes only by serve: a reloaded template that has not served yet never
// replaces crashed instances of the one that does.
//
// It has no lock of its own: the group's mu guards it, because what it
// says is decided together with the instance set under that lock (a launch
// takes its template, Reclaim and a cloud wait's take-back check the
// serving version, the reconciler counts the surge) and must be read at
// the same moment.
type deployState struct {
	group string // the group's name: versions are named for it
	log   *slog.Logger

	// base is the configured template (a reload replaces it), vars the
	// variables the last successful deploy set, and next is base with
	// vars: what `shoal deploy` rolls out; nextVersion names it.
	base        config.Template
	vars        map[string]string
	next        config.Template
	nextVersion string
	// tmpl is the serving template: what the instances in service run and
	// what replacements and scale-ups start from; version names it.
	tmpl    config.Template
	version string
	// surge is how many instances a running deploy keeps beyond desired;
	// target is the version it rolls out or back to ("" when none runs)
	// and rollTmpl its template, which new instances start from meanwhile.
	surge    int
	target   string
	rollTmpl config.Template
	// canary, while a canary deploy runs, is how many instances of target
	// it wants: launches start target until that many are active, and the
	// serving template beyond (canary.go).
	canary int
}

// newDeployState returns the templates of a group configured with base,
// with the state stored for it (nil for a group never seen before): the
// deployed variables and the serving template. A group with no serving
// template yet (new, or stored by an older shoal) serves its configured
// one.
func newDeployState(group string, base config.Template, stored *store.GroupState, log *slog.Logger) deployState {
	d := deployState{group: group, log: log}
	if stored != nil {
		d.vars = d.decodeVars(stored.TemplateVars)
	}
	d.setBase(base)
	d.tmpl, d.version = d.next, d.nextVersion
	if stored != nil && stored.ServingTemplate != "" {
		if t, err := config.DecodeTemplate(group, stored.ServingTemplate); err != nil {
			log.Warn("stored serving template is unreadable; serving the configured one", "err", err)
		} else {
			d.tmpl, d.version = t, t.Version(group)
		}
	}
	return d
}

// setBase makes t the configured template and recomputes the one the next
// deploy rolls out. Deployed variables t no longer declares are dropped.
func (d *deployState) setBase(t config.Template) {
	d.base = t
	keep := map[string]string{}
	for k, v := range d.vars {
		if _, ok := t.Vars[k]; ok || (k == config.SetImage && t.IsContainer()) {
			keep[k] = v
		} else {
			d.log.Warn("deployed template variable is no longer declared; dropped", "var", k)
		}
	}
	next, err := t.WithVars(d.group, keep)
	if err != nil {
		d.log.Warn("deployed template variables no longer apply; using the configured template", "err", err)
		next, keep = t, nil
	}
	if len(keep) == 0 {
		keep = nil
	}
	d.next, d.vars, d.nextVersion = next, keep, next.Version(d.group)
}

// serve makes t, which a deploy has just put on every instance, the
// serving template, with the variables it overrides as those the next
// deploy starts from.
func (d *deployState) serve(t config.Template, version string) {
	d.tmpl, d.version, d.vars = t, version, t.Overrides()
	d.setBase(d.base)
}

// targetWith returns the template a deploy with these variable overrides
// would roll out: the configured template with the variables of the last
// deploy, then set. An unknown variable is a *config.UnknownVarError.
func (d *deployState) targetWith(set map[string]string) (config.Template, error) {
	vars := maps.Clone(d.vars)
	if vars == nil {
		vars = map[string]string{}
	}
	maps.Copy(vars, set)
	return d.base.WithVars(d.group, vars)
}

// begin starts a roll of tmpl, named version: launches start it from now.
func (d *deployState) begin(version string, tmpl config.Template) {
	d.target, d.rollTmpl = version, tmpl
}

// end ends the roll: launches start the serving template again.
func (d *deployState) end() {
	d.surge, d.target, d.rollTmpl, d.canary = 0, "", config.Template{}, 0
}

// launching returns what a new instance starts: the serving template, or
// during a roll the one it rolls; during a canary, the one it rolls only
// while fewer than its canary instances are active (rolled is how many).
// A replacement or scale-up never starts a reloaded template that has not
// served yet.
func (d *deployState) launching(rolled int) (config.Template, string) {
	if d.target != "" && (d.canary == 0 || rolled < d.canary) {
		return d.rollTmpl, d.target
	}
	return d.tmpl, d.version
}

// rolls reports whether a roll runs and version is what it rolls: an
// instance of it that answers its checks badly fails at once (see gate).
func (d *deployState) rolls(version string) bool {
	return d.target != "" && version == d.target
}

// takesBack reports whether an instance of version may rejoin the group
// without a start (Reclaim, a cloud wait's take-back): only outside a
// roll, and only if it runs the serving version.
func (d *deployState) takesBack(version string) bool {
	return d.target == "" && version == d.version
}

// configured returns the version the configuration describes when it is
// not the serving one ("" when it is): what `shoal deploy` would roll out.
func (d *deployState) configured() string {
	if d.nextVersion == d.version {
		return ""
	}
	return d.nextVersion
}

// stored returns what the group's state records of its templates: the
// serving template (none for a removed group, which, added back, starts
// its configured one) and the deployed variables.
func (d *deployState) stored(removed bool) (serving, vars string) {
	if !removed {
		serving = config.EncodeTemplate(d.tmpl)
	}
	return serving, encodeVars(d.vars)
}

func (d *deployState) decodeVars(s string) map[string]string {
	if s == "" {
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		d.log.Warn("stored template variables are unreadable; ignored", "err", err)
		return nil
	}
	return m
}

func encodeVars(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	b, _ := json.Marshal(m) // a map of strings always encodes
	return string(b)
}
