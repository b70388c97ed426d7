package config

import (
	"reflect"
	"strings"
)

// What the generators of docs/ (internal/docgen) walk: the defaults tables
// assembled into one Config, the walk over its keys, and the fixed lists of
// values the decoders take. Nothing here is used to load a file.

// DefaultsTree is every table in one Config: a pointer is the defaults of
// its section when the file has it, a list holds the defaults of each item.
// It only assembles the tables; no default is written here.
func DefaultsTree() Config {
	c := defaultConfig
	c.Compression = &defaultCompression
	c.Admin.TLS = &TLSFiles{}
	c.Compat.SacloudAutoscaler = &defaultSacloud
	g := defaultGroup
	g.Plans = []Plan{{}}
	g.Providers = []GroupProvider{{}}
	g.Health.Passive = &defaultPassive
	g.Template.PreStart, g.Template.PreStop = &defaultPreStart, &defaultPreStop
	a := defaultAutoscale
	a.Rules = []Rule{defaultRule}
	a.Target = &defaultTarget
	sched := defaultSchedule
	sched.When = &Guard{}
	a.Schedules = []Schedule{sched}
	a.Predictive = &defaultPredictive
	g.Autoscale = &a
	g.ScaleToZero = &defaultScaleToZero
	g.Sticky = &defaultSticky
	o := defaultOutliers
	o.FailureRate, o.Latency = &defaultFailureRate, &defaultLatencyOutlier
	g.Outliers = &o
	g.Limits = &defaultLimits
	g.Placement.Consolidation = &defaultConsolidation
	can := defaultCanary
	can.Steps = []CanaryStep{defaultCanaryStep}
	an := defaultCanaryAnalysis
	an.MaxErrorRate, an.MaxP99 = &defaultCanaryError, &defaultCanaryP99
	can.Analysis = &an
	g.Deploy.Canary = &can
	bg := defaultBlueGreen
	bgan := defaultCanaryAnalysis
	bgan.MaxErrorRate, bgan.MaxP99 = &defaultCanaryError, &defaultCanaryP99
	bg.Analysis = &bgan
	g.Deploy.BlueGreen = &bg
	g.WarmPool = &defaultWarmPool
	c.Groups = []Group{g}
	src := defaultSource
	src.Prometheus = &PromSource{Auth: &PromAuth{Basic: &PromBasic{}}}
	src.HTTP = &HTTPSource{}
	c.Metrics.Sources = []Source{src}
	fe := defaultFrontend
	fe.Compression = &defaultCompression
	fe.RateLimit = &defaultRateLimit
	tls := defaultTLS
	tls.Certificates = []TLSFiles{{}}
	tls.ACME = &defaultACME
	fe.TLS = &tls
	r := defaultRoute
	r.Redirect, r.Respond, r.BasicAuth = &defaultRedirect, &defaultRespond, &defaultBasicAuth
	fe.Routes = []Route{r}
	c.Frontends = []Frontend{fe}
	cloud := DefaultCloud
	cloud.Emulator = &Emulator{}
	c.Providers = []Provider{{Cloud: &cloud}}
	c.Notify.Targets = []NotifyTarget{defaultNotifyTarget}
	rec := defaultGSLBRecord
	rec.Sites = []GSLBSite{{Check: defaultGSLBCheck}}
	c.GSLB = &GSLB{Records: []GSLBRecord{rec}}
	ha := defaultHA
	ha.VIP = &defaultHAVIP
	c.HA = &ha
	return c
}

// IsInline reports whether f holds keys of its parent's mapping (a
// provider's type-specific keys).
func IsInline(f reflect.StructField) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return opts == "inline"
}

// IsSection reports whether t is a section of the file: a struct with keys.
func IsSection(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && len(schemaOf(t)) > 0
}

// WalkDefaults calls leaf for every key below v, a section of DefaultsTree,
// with its path (list items as [0]) and its value; sections are entered,
// not passed.
func WalkDefaults(v reflect.Value, path string, leaf func(path string, f reflect.StructField, v reflect.Value)) {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if (key == "" || key == "-") && !IsInline(f) {
			continue
		}
		fv, p := v.Field(i), join(path, key)
		if IsInline(f) {
			if !fv.IsNil() && v.Type() != reflect.TypeFor[Provider]() {
				WalkDefaults(fv.Elem(), path, leaf)
			}
			continue
		}
		switch t := f.Type; {
		case IsSection(t):
			WalkDefaults(fv, p, leaf)
			continue
		case t.Kind() == reflect.Pointer && IsSection(t.Elem()) && !fv.IsNil():
			WalkDefaults(fv.Elem(), p, leaf)
			continue
		case t.Kind() == reflect.Slice && IsSection(t.Elem()) && fv.Len() > 0:
			WalkDefaults(fv.Index(0), p+"[0]", leaf)
			continue
		}
		leaf(p, f, fv)
	}
	if v.Type() == reflect.TypeFor[Provider]() {
		// A provider's type-specific keys, type by type as registered.
		seen := map[reflect.Type]bool{}
		for _, pt := range ProviderTypes() {
			for _, kt := range pt.KeyTypes() {
				if !seen[kt] {
					seen[kt] = true
					WalkDefaults(ProviderKeyDefaults(v, kt, pt), path, leaf)
				}
			}
		}
	}
}

// ProviderKeyDefaults is the table of provider keys of type kt in v, a
// Provider of DefaultsTree, or, for keys not inline in Provider, pt's
// registration's.
func ProviderKeyDefaults(v reflect.Value, kt reflect.Type, pt ProviderType) reflect.Value {
	for i := range v.NumField() {
		if fv := v.Field(i); fv.Kind() == reflect.Pointer && fv.Type().Elem() == kt && !fv.IsNil() {
			return fv.Elem()
		}
	}
	for _, k := range pt.Keys {
		if reflect.TypeOf(k) == kt {
			return reflect.ValueOf(k)
		}
	}
	return reflect.Zero(kt)
}

// KeyValues are the keys ("Type.key") whose decoder takes values from a
// fixed list, and the list.
func KeyValues() map[string][]string {
	var notify []string
	for _, nt := range notifyTypes {
		notify = append(notify, nt.name)
	}
	var providers []string
	for _, pt := range ProviderTypes() {
		providers = append(providers, pt.Name)
	}
	return map[string][]string{
		"Config.shutdown":    {ShutdownKeep, ShutdownStop},
		"Group.balance":      balanceAlgorithms,
		"Deploy.strategy":    DeployStrategies,
		"Group.scale_in":     ScaleInPolicies,
		"Group.retries":      RetryModes,
		"Placement.strategy": {PlaceSpread, PlacePack},
		"Update.mode":        UpdateModes,
		"Frontend.mode":      {ModeHTTP, ModeTCP},
		"TLS.ticket_keys":    {TicketKeysRotate, TicketKeysOff},
		"Health.type":        checkTypes,
		"Health.method":      checkMethods,
		"Passive.observe":    observeModes,
		"Passive.on_error":   onErrors,
		"NotifyTarget.type":  notify,
		"Source.on_missing":  {SourceHold, SourceUp, SourceDown},
		"Provider.type":      providers,
	}
}

// IntKeyValues are the integer keys whose decoder takes values from a
// fixed list, and the list.
func IntKeyValues() map[string][]int { return map[string][]int{"Redirect.code": redirectCodes} }

// A NotifyType is a type of notification target: the keys it takes besides
// the common ones, and those of them it requires.
type NotifyType struct {
	Name           string
	Keys, Required []string
}

// NotifyTypes are the types of notification target.
func NotifyTypes() []NotifyType {
	out := make([]NotifyType, len(notifyTypes))
	for i, nt := range notifyTypes {
		out[i] = NotifyType{Name: nt.name, Keys: nt.keys, Required: nt.required}
	}
	return out
}

// SchemaID is where docs/shoal.schema.json, the JSON Schema of the file,
// is published: its $id.
const SchemaID = "https://github.com/shoal-lb/shoal/raw/main/docs/shoal.schema.json"
