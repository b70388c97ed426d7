package config

import (
	"fmt"
	"os"
	"strings"

	"github.com/distribution/reference"
	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/template"
)

// SetImage is the key of `shoal deploy GROUP --set template.image=REF`:
// not a variable, the container image a deploy rolls out.
const SetImage = "template.image"

// CheckImage checks that ref is an image reference a runtime pulls:
// [registry/]name[:tag][@digest], as the distribution project parses it.
func CheckImage(ref string) error {
	if ref == "" {
		return fmt.Errorf("must not be empty")
	}
	if _, err := reference.ParseNormalizedNamed(ref); err != nil {
		return fmt.Errorf("image reference %q does not parse: %w", ref, err)
	}
	return nil
}

// container decodes a template's container keys (image and what goes with
// it) into t; over bounds the expansions as the command's. Their checks
// against the provider are link's (checkContainer).
func (d *decoder) container(f *fields, t *Template, data TemplateData, over func(n *yaml.Node, field, out string) bool) {
	image, in := f.str("image", "")
	if in == nil {
		for _, k := range []string{"port", "args", "volumes", "runtime", "registry_auth", "insecure_registry"} {
			if n := f.get(k); n != nil {
				d.errorf(n, f.field(k), "applies to a container; set template.image too, or leave %s out", k)
			}
		}
		return
	}
	if err := CheckImage(image); err != nil {
		d.errorf(in, f.field("image"), "%v", err)
	}
	// podman unless set: a container's only (a process has no runtime).
	t.Image, t.Runtime = image, RuntimePodman
	if cn := f.get("command"); cn != nil {
		d.errorf(cn, f.field("command"), "a container runs its image's entrypoint: set template.args for its arguments, or leave image out to run a command")
	}
	if port, pn := f.integer("port", 0); pn == nil {
		f.require("port")
	} else if port < 1 || port > 65535 {
		d.errorf(pn, f.field("port"), "must be a port from 1 to 65535 (the one the container serves on inside), got %d", port)
	} else {
		t.Port = port
	}
	if an := f.get("args"); an != nil {
		items, _ := d.sequence(an, f.field("args"), "a list of strings")
		for i, it := range items {
			field := fmt.Sprintf("%s[%d]", f.field("args"), i)
			s, ok := d.str(it, field)
			if !ok {
				continue
			}
			tt, out, err := template.Compile(s, data)
			if err != nil {
				d.errorf(it, field, "%v", err)
				continue
			}
			if over(it, field, out) {
				break
			}
			t.Args = append(t.Args, s)
			t.program.Command = append(t.program.Command, tt)
		}
	}
	for _, it := range f.strings("volumes") {
		v, err := checkVolume(d.dir, it.val)
		if err != nil {
			d.errorf(it.node, it.field, "%v", err)
			continue
		}
		t.Volumes = append(t.Volumes, v)
	}
	if rt, rn := f.str("runtime", t.Runtime); rn != nil {
		if rt != RuntimePodman && rt != RuntimeDocker {
			d.errorf(rn, f.field("runtime"), "must be %s or %s, got %q", RuntimePodman, RuntimeDocker, rt)
		} else {
			t.Runtime = rt
		}
	}
	if auth, an := f.str("registry_auth", ""); an != nil {
		// Checked by link where it is read: this machine's for the local
		// provider, each host's for ssh.
		t.RegistryAuth = abs(d.dir, auth)
	}
	if insecure, bn := f.boolean("insecure_registry", false); bn != nil {
		if insecure && t.Runtime == RuntimeDocker {
			d.errorf(bn, f.field("insecure_registry"), "docker has no per-pull flag for a plain-HTTP registry; list it in the daemon's insecure-registries instead")
		}
		t.InsecureRegistry = insecure
	}
}

// checkVolume checks HOST:CONTAINER[:OPTIONS] (a relative host path is
// the config file's directory's, a bare name a runtime's named volume)
// and returns it with the host path made absolute.
func checkVolume(dir, v string) (string, error) {
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return "", fmt.Errorf("volume %q: must be HOST:CONTAINER or HOST:CONTAINER:OPTIONS", v)
	}
	if !strings.HasPrefix(parts[1], "/") {
		return "", fmt.Errorf("volume %q: the container's path %q must be absolute", v, parts[1])
	}
	if strings.ContainsAny(parts[0], "/.") {
		parts[0] = abs(dir, parts[0])
	}
	return strings.Join(parts, ":"), nil
}

// checkContainer checks a container template against the group's
// provider: only the local and ssh providers run containers, and the local
// one reads registry_auth here (the runtime is core.Preflight's on this
// machine, `shoal providers check`'s on a host).
func (d *decoder) checkContainer(tf *fields, t Template, provider string, cloud bool) {
	if n := tf.get("image"); n != nil && cloud {
		d.errorf(n, tf.field("image"), "provider %s creates a server for each instance from its own image; container images run on the local and ssh providers", provider)
	}
	an := tf.get("registry_auth")
	if an == nil || provider != ProviderLocal || !t.IsContainer() {
		return // an ssh host's file is on the host
	}
	if fi, err := os.Stat(t.RegistryAuth); err != nil {
		d.errorf(an, tf.field("registry_auth"), "registry credentials: %v", err)
	} else if t.Runtime == RuntimeDocker && !fi.IsDir() {
		d.errorf(an, tf.field("registry_auth"), "docker reads credentials from the directory of its config.json (docker --config DIR), and %s is a file", t.RegistryAuth)
	} else if t.Runtime == RuntimePodman && fi.IsDir() {
		d.errorf(an, tf.field("registry_auth"), "podman reads credentials from an auth file (podman --authfile FILE, as `podman login` writes it), and %s is a directory", t.RegistryAuth)
	}
}
