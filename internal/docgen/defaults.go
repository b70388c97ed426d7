package docgen

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// writtenAs is how the file writes a default that its table holds in
// another form: the table has what `auto` loads as (Sample 1, Adaptive).
var writtenAs = map[string]string{
	"access_log.sample":        "`auto`",
	"access_log.enabled":       "unset",
	"providers[].health_grace": "`10m` for exec, sacloud and ec2; none for ssh",
	"groups[].retries":         "`connect` on the local provider; `idempotent` on others",
}

// defaultNotes say what a default is relative to, or how Load makes it.
var defaultNotes = map[string]string{
	"state_dir":                              "relative to the config file's directory",
	"admin.socket":                           "relative to state_dir; mode 0600",
	"haproxy.binary":                         "looked up on PATH",
	"access_log.sample":                      "one in N, adapted per group to log about 100 of its requests a second",
	"access_log.enabled":                     "on only while a latency_ms policy metric, a max_p99 analysis or outliers.latency reads the log; writing enabled or sample decides",
	"groups[].health.fastinter":              "or interval when that is shorter",
	"groups[].health.downinter":              "the interval",
	"groups[].template.dir":                  "the config file's directory",
	"providers[].hosts[].key_file":           "relative to the config file's directory; ~ is your home",
	"providers[].hosts[].known_hosts":        "~ is the home of the user running shoal",
	"providers[].hosts[].capacity.instances": "0: unbounded",
	"providers[].hosts[].capacity.cores":     "0: unbounded",
	"groups[].provider":                      "the built-in provider: this machine",
	"providers[].health_grace":               "the health.grace of its groups that set none; without it, theirs",
	"groups[].max_hourly_instances":          "0: no budget",
	"groups[].retries":                       "a tcp frontend's group: connect",
	"providers[].credentials_file":           "ec2: the keys come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; sacloud: from SAKURACLOUD_ACCESS_TOKEN and SAKURACLOUD_ACCESS_TOKEN_SECRET",
	"providers[].profile":                    "ec2: a profile of credentials_file, or with credentials: default the chain's",
	"providers[].credentials":                "ec2: file with a credentials_file, env without",
	"providers[].endpoint":                   "ec2: the region's; set it for emulators (moto) only",
	"providers[].server_plans":               "sacloud: every plan takes template.plan",
	"providers[].instance_types":             "ec2: every plan takes instance_type, or the launch template's",
	"providers[].template.network_interfaces[].assign_netmask_len": "0: the block's",
	"groups[].autoscale.rules[].name":                              "`rule-N`, N counting from 1",
	"groups[].autoscale.rules[].above":                             "not set; a rule needs above or below",
	"groups[].autoscale.rules[].below":                             "not set; a rule needs above or below",
	"groups[].autoscale.rules[].for":                               "not set; a rule needs for, or statistic and over",
	"groups[].autoscale.rules[].over":                              "not set; a rule needs for, or statistic and over",
	"groups[].autoscale.schedule[].name":                           "`schedule-N`, N counting from 1",
	"groups[].autoscale.schedule[].min_size":                       "0: not set",
	"groups[].autoscale.schedule[].max_size":                       "0: not set",
	"groups[].autoscale.predictive.capacity":                       "0: measured from the group's own history",
}

func renderDefaults() string {
	var b strings.Builder
	b.WriteString(`# Config defaults

<!-- Generated from the defaults tables in internal/config by make docs.
     Do not edit; TestDocsUpToDate fails when this file is stale. -->

What each key of shoal.yaml is when the file leaves it out (see the
[config reference](config.md) for what the keys mean and
the values they accept). ` + "`[]`" + ` marks the items of a list; the keys of an
optional section apply when the section is there.

| key | default |
| --- | --- |
`)
	tree := config.DefaultsTree()
	seen := map[string]bool{} // a key two provider types share is one row
	config.WalkDefaults(reflect.ValueOf(tree), "", func(path string, f reflect.StructField, v reflect.Value) {
		path = strings.ReplaceAll(path, "[0]", "[]")
		if seen[path] {
			return
		}
		seen[path] = true
		def := formatDefault(f, v)
		if w := writtenAs[path]; w != "" {
			def = w
		}
		if note := defaultNotes[path]; note != "" {
			def += " (" + note + ")"
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", path, def)
	})
	return b.String()
}

// formatDefault writes a table's value as the file would.
func formatDefault(f reflect.StructField, v reflect.Value) string {
	if f.Tag.Get("required") == "true" {
		return "required"
	}
	if f.Name == "_" {
		return "none"
	}
	switch x := v.Interface().(type) {
	case time.Duration:
		return "`" + formatDuration(x) + "`"
	case fmt.Stringer:
		return "`" + x.String() + "`"
	case uint32: // socket_mode, a file mode
		return fmt.Sprintf("`%#o`", x)
	case int64: // max_size, a number of bytes
		return "`" + formatSize(x) + "`"
	case bool:
		return "`" + strconv.FormatBool(x) + "`"
	case string:
		if x == "" {
			return "none"
		}
		return "`" + x + "`"
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return "none"
		}
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			return "none"
		}
		items := make([]string, v.Len())
		for i := range items {
			items[i] = fmt.Sprint(v.Index(i).Interface())
		}
		return "`[" + strings.Join(items, ", ") + "]`"
	}
	return "`" + fmt.Sprint(v.Interface()) + "`"
}

// formatSize writes n bytes in the largest binary unit that divides it.
func formatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// formatDuration drops the zero units time.Duration.String writes: 10m, not 10m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
