package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestContainerConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, tmpl, at, want string }{
		{"image and command", `{image: "app:1", port: 80, command: [app]}`, `[app]`,
			`groups[0].template.command: a container runs its image's entrypoint: set template.args for its arguments, or leave image out to run a command`},
		{"reference that does not parse", `{image: "Registry.example.com/App:1.4", port: 80}`, `"Registry`,
			`groups[0].template.image: image reference "Registry.example.com/App:1.4" does not parse: invalid reference format: repository name (App) must be lowercase`},
		{"tag with a space", `{image: "app:1 4", port: 80}`, `"app`,
			`groups[0].template.image: image reference "app:1 4" does not parse: invalid reference format`},
		{"no port", `{image: "app:1"}`, `{image`,
			`groups[0].template.port: required`},
		{"port out of range", `{image: "app:1", port: 0}`, `0}`,
			`groups[0].template.port: must be a port from 1 to 65535 (the one the container serves on inside), got 0`},
		{"port without image", `{command: [app], port: 80}`, `80}`,
			`groups[0].template.port: applies to a container; set template.image too, or leave port out`},
		{"unknown runtime", `{image: "app:1", port: 80, runtime: containerd}`, `containerd`,
			`groups[0].template.runtime: must be podman or docker, got "containerd"`},
		{"volume without a container path", `{image: "app:1", port: 80, volumes: ["/data"]}`, `"/data"`,
			`groups[0].template.volumes[0]: volume "/data": must be HOST:CONTAINER or HOST:CONTAINER:OPTIONS`},
		{"relative container path", `{image: "app:1", port: 80, volumes: ["/data:data"]}`, `"/data:data"`,
			`groups[0].template.volumes[0]: volume "/data:data": the container's path "data" must be absolute`},
		{"args field unknown", `{image: "app:1", port: 80, args: ["{{.Nope}}"]}`, `"{{.Nope}}"`,
			`groups[0].template.args[0]: template: can't evaluate field Nope (have .Name, .Port, .Index, .Group, .Vars)`},
		{"insecure docker", `{image: "app:1", port: 80, runtime: docker, insecure_registry: true}`, `true}`,
			`groups[0].template.insecure_registry: docker has no per-pull flag for a plain-HTTP registry; list it in the daemon's insecure-registries instead`},
		{"credentials missing", `{image: "app:1", port: 80, registry_auth: /nonexistent/auth.json}`, `/nonexistent`,
			`groups[0].template.registry_auth: registry credentials: stat /nonexistent/auth.json: no such file or directory`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := "listen: 127.0.0.1:8080\ngroups:\n  - {name: web, min_size: 1, max_size: 2, template: " + tc.tmpl + "}\n"
			line := strings.Split(doc, "\n")[2]
			want := fmt.Sprintf("shoal.yaml:3:%d: %s", strings.Index(line, tc.at)+1, tc.want)
			_, err := Parse("shoal.yaml", []byte(doc))
			if err == nil || err.Error() != want {
				t.Fatalf("Parse error:\n got: %v\nwant: %s", err, want)
			}
		})
	}
}

func TestContainerTemplate(t *testing.T) {
	dir := t.TempDir()
	auth := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(auth, []byte(`{"auths":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf(`listen: 127.0.0.1:8080
groups:
  - name: web
    min_size: 1
    max_size: 2
    template:
      image: registry.example.com/app:1.4
      port: 8080
      args: ["--name", "{{.Name}}", "--tag={{.Vars.tag}}"]
      env: {MODE: "{{.Group}}"}
      volumes: ["data:/var/lib/app", "/srv/static:/static:ro"]
      registry_auth: %s
      vars: {tag: a}
`, auth)
	cfg, err := Parse(filepath.Join(dir, "shoal.yaml"), []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tm := cfg.Groups[0].Template
	if !tm.IsContainer() || tm.Runtime != RuntimePodman || tm.Port != 8080 || tm.RegistryAuth != auth || len(tm.Command) != 0 {
		t.Fatalf("template %+v", tm)
	}
	if want := []string{"data:/var/lib/app", "/srv/static:/static:ro"}; strings.Join(tm.Volumes, " ") != strings.Join(want, " ") {
		t.Fatalf("volumes %v, want %v (a named volume kept, a path as is)", tm.Volumes, want)
	}
	args, env, err := tm.Expand(TemplateData{Name: "web-007", Group: "web", Port: 10007, Host: "10.0.0.2"})
	if err != nil || strings.Join(args, " ") != "--name web-007 --tag=a" || strings.Join(env, " ") != "MODE=web" {
		t.Fatalf("Expand: %q %q %v", args, env, err)
	}

	// Stored and read back as the serving template: the same version.
	back, err := DecodeTemplate("web", EncodeTemplate(tm))
	if err != nil || back.Version("web") != tm.Version("web") || !back.SameSource(tm) {
		t.Fatalf("stored template: %v, version %s vs %s", err, back.Version("web"), tm.Version("web"))
	}

	// A deploy's --set template.image: another version, the reference checked.
	next, err := tm.WithVars("web", map[string]string{SetImage: "registry.example.com/app:1.5", "tag": "b"})
	if err != nil {
		t.Fatal(err)
	}
	if next.Image != "registry.example.com/app:1.5" || next.Version("web") == tm.Version("web") || next.Overrides()[SetImage] != next.Image {
		t.Fatalf("after --set template.image: %+v", next)
	}
	if _, err := tm.WithVars("web", map[string]string{SetImage: "Bad Ref"}); err == nil || !strings.Contains(err.Error(), "does not parse") {
		t.Fatalf("--set template.image=Bad Ref: %v", err)
	}
	proc := cfg.Groups[0].Template
	proc.Image = ""
	if _, err := proc.WithVars("web", map[string]string{SetImage: "app:2"}); err == nil || !strings.Contains(err.Error(), "runs a command") {
		t.Fatalf("--set template.image on a command template: %v", err)
	}
}

// TestContainerOnCloudRefused: a cloud's servers run their own image.
func TestContainerOnCloudRefused(t *testing.T) {
	doc := `listen: 127.0.0.1:8080
providers:
  - name: sky
    type: exec
    exec: {create: [create], delete: [delete], list: [list]}
groups:
  - {name: web, min_size: 1, max_size: 2, provider: sky, template: {image: "app:1", port: 80}}
`
	_, err := Parse("shoal.yaml", []byte(doc))
	if err == nil || !strings.Contains(err.Error(), "groups[0].template.image: provider sky creates a server for each instance from its own image") {
		t.Fatalf("Parse: %v", err)
	}
}

// TestContainerOnSSHAuthOnHosts: an ssh group's registry_auth is a file on
// its hosts, not looked for here.
func TestContainerOnSSHAuthOnHosts(t *testing.T) {
	dir, _ := filepath.Abs("testdata/ssh")
	doc := "listen: 127.0.0.1:8080\nproviders: [{name: rack, type: ssh, hosts: [{address: 10.0.0.2, user: deploy, key_file: " + dir + "/id_ed25519, known_hosts: " + dir + "/known_hosts}]}]\n" +
		"groups:\n  - {name: web, min_size: 1, max_size: 2, provider: rack, template: {image: \"app:1\", port: 80, registry_auth: /etc/shoal/on-the-hosts.json}}\n"
	cfg, err := Parse("shoal.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Groups[0].Template.RegistryAuth; got != "/etc/shoal/on-the-hosts.json" {
		t.Fatalf("registry_auth %q", got)
	}
}
