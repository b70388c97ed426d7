package container

import (
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// TestArgv: what each runtime is asked, word by word (never a shell
// string): labels, the published port, volumes, env, the stop timeout,
// then the image and the entrypoint's args.
func TestArgv(t *testing.T) {
	tm := config.Template{Image: "registry.example.com/app:1.4", Port: 8080, Runtime: config.RuntimePodman,
		Volumes: []string{"/srv/data:/data:ro"}, StopTimeout: 2500 * time.Millisecond,
		RegistryAuth: "/etc/shoal/auth.json", InsecureRegistry: true}
	s := Spec{Name: "shoal-web-001-x", Owner: "/var/lib/shoal", Host: "10.0.0.2", Instance: "web-001", Group: "web",
		HostAddr: "10.0.0.2", HostPort: 20001, Args: []string{"--name", "web-001; rm -rf /"}, Env: []string{"A=b c"}}
	for _, tc := range []struct {
		got  []string
		want string
	}{
		{RunArgv(&tm, s), "podman|run|--detach|--rm|--pull=never|--name|shoal-web-001-x|--label|shoal.owner=/var/lib/shoal|--label|shoal.host=10.0.0.2|--label|shoal.instance=web-001|--label|shoal.group=web|--publish|10.0.0.2:20001:8080|--stop-timeout|3|--volume|/srv/data:/data:ro|--env|A=b c|registry.example.com/app:1.4|--name|web-001; rm -rf /"},
		{PullArgv(&tm), "podman|pull|--quiet|--authfile|/etc/shoal/auth.json|--tls-verify=false|registry.example.com/app:1.4"},
		{PullArgv(&config.Template{Image: "app:1", Runtime: config.RuntimeDocker, RegistryAuth: "/etc/shoal/docker"}), "docker|--config|/etc/shoal/docker|pull|app:1"},
		{StopArgv("docker", "abc", 10*time.Second), "docker|stop|--time|10|abc"},
		{LogsArgv("podman", "abc", 20, true), "podman|logs|--tail|20|--follow|abc"},
		{LogsArgv("podman", "abc", 0, false), "podman|logs|abc"},
		{ListArgv("podman", "o", "h"), "podman|ps|--all|--quiet|--no-trunc|--filter|label=shoal.owner=o|--filter|label=shoal.host=h"},
	} {
		if got := strings.Join(tc.got, "|"); got != tc.want {
			t.Errorf("argv\n got: %s\nwant: %s", got, tc.want)
		}
	}
}

// TestParseInspect reads podman's and docker's inspect output alike; a
// container that does not run has no pid.
func TestParseInspect(t *testing.T) {
	out := `[{"Id":"abc","Name":"/shoal-web-001-x","State":{"Status":"running","Running":true,"Pid":42,"ExitCode":0},"Config":{"Labels":{"shoal.instance":"web-001"}}},
	{"Id":"def","Name":"shoal-web-002-y","State":{"Status":"exited","Running":false,"Pid":43,"ExitCode":137},"Config":{"Labels":null}}]`
	infos, err := ParseInspect([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].ID != "abc" || infos[0].Name != "shoal-web-001-x" || !infos[0].Running || infos[0].PID != 42 ||
		infos[0].Labels[LabelInstance] != "web-001" || infos[1].PID != 0 || infos[1].ExitCode != 137 || infos[1].Status != "exited" {
		t.Fatalf("%+v", infos)
	}
	if _, err := ParseInspect([]byte("Error: no such container")); err == nil {
		t.Fatal("parsed an error message")
	}
}
