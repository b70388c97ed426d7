package exec

import (
	"fmt"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// Type is the type name of exec entries of providers.
const Type = "exec"

// Config is the rest of a provider entry of type exec: it drives a cloud
// through its CLI with three argv templates (no shell), each run with a
// timeout, answering JSON on stdout.
type Config struct {
	// Start creates one server and prints {"id": ..., "address": ...}.
	Start []string `yaml:"start" required:"true"`
	// Stop deletes the server {{.ID}}; deleting one already gone succeeds.
	Stop []string `yaml:"stop" required:"true"`
	// List prints a JSON array of the servers tagged shoal-owner={{.Owner}}.
	List []string `yaml:"list" required:"true"`
	// PowerOff shuts the server {{.ID}} down without deleting it, and
	// PowerOn boots it again (both optional, together): a group's warm
	// pool can then wait stopped (warm_pool.state: stopped). list must
	// then say "stopped" of a server shut down (without them a stopped
	// server is taken for gone).
	PowerOff []string `yaml:"power_off"`
	PowerOn  []string `yaml:"power_on"`
	// Timeout bounds one run of a command.
	Timeout time.Duration `yaml:"timeout"`
}

// Defaults holds the defaults of an exec provider's keys.
var Defaults = Config{Timeout: 2 * time.Minute}

// maxTimeout bounds Timeout; minTimeout is the clouds' least.
const (
	minTimeout = time.Second
	maxTimeout = time.Hour
)

// ProviderType is exec's entry type (registered by provider/all). Its
// servers may each say their port (host:port), so port is optional.
var ProviderType = config.ProviderType{
	Name: Type, Cloud: true, Keys: []any{Defaults},
	Source: "what the provider's start command makes",
	Decode: decode,
	WarmStates: func(p *config.Provider) ([]string, string) {
		if c := Of(*p); c != nil && len(c.PowerOff) > 0 && len(c.PowerOn) > 0 {
			return config.WarmStates, ""
		}
		return []string{config.WarmRunning}, ": set the provider's power_off and power_on commands to keep them stopped"
	},
}

// Of returns the exec keys of entry p (nil when p is not an exec entry).
func Of(p config.Provider) *Config {
	c, _ := p.Spec.(*Config)
	return c
}

// decode decodes an exec entry's commands: each an argv of templates over
// Data, trial-run now. A command's {{.Port}} needs the entry's
// port.
func decode(e *config.ProviderEntry, p *config.Provider) {
	c := &Config{}
	for _, cmd := range []struct {
		key string
		out *[]string
	}{{"start", &c.Start}, {"stop", &c.Stop}, {"list", &c.List}, {"power_off", &c.PowerOff}, {"power_on", &c.PowerOn}} {
		n := e.Node(cmd.key)
		if n == nil {
			continue
		}
		items, ok := e.Sequence(n, e.Field(cmd.key), "a list of strings (an argv; there is no shell)")
		if ok && len(items) == 0 {
			e.Errorf(n, e.Field(cmd.key), "must not be empty")
		}
		for i, item := range items {
			field := fmt.Sprintf("%s[%d]", e.Field(cmd.key), i)
			s, ok := e.Str(item, field)
			if !ok {
				continue
			}
			if err := CheckCommandArg(s, i, p.Cloud.Port != 0); err != nil {
				e.Errorf(item, field, "%v", err)
			}
			if i == 0 && strings.Contains(s, "/") && !strings.Contains(s, "{{") {
				// A program named by path is relative to the config file,
				// as instance templates' are to their dir.
				s = e.FromConfigDir(s)
			}
			*cmd.out = append(*cmd.out, s)
		}
	}
	for _, pair := range [][2]string{{"power_off", "power_on"}, {"power_on", "power_off"}} {
		if n := e.Node(pair[0]); n != nil && e.Node(pair[1]) == nil {
			e.Errorf(n, e.Field(pair[1]), "required with %s: a server shut down must be booted again, and one booted shut down", pair[0])
		}
	}
	c.Timeout = e.Duration("timeout", Defaults.Timeout, minTimeout, maxTimeout)
	p.Spec = c
}
