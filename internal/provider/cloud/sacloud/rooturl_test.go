package sacloud

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/sacloud/iaas-api-go"
)

// fakeAPI is a fake Sakura Cloud API served by the test on 127.0.0.1, as
// another process would serve one: zones, server plans (1 core: 1 and 2
// GB) and an empty server list; it records the paths it was asked.
func fakeAPI(t *testing.T) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/api/cloud/1.1/zone"):
			fmt.Fprint(w, `{"Total":2,"From":0,"Count":2,"Zones":[{"ID":"31002","Name":"tk1b"},{"ID":"29001","Name":"tk1v"}]}`)
		case strings.HasSuffix(r.URL.Path, "/api/cloud/1.1/product/server"):
			fmt.Fprint(w, `{"Total":2,"From":0,"Count":2,"ServerPlans":[`+
				`{"ID":"100001001","Name":"1Core-1GB","CPU":1,"MemoryMB":1024,"Commitment":"standard","Availability":"available","Generation":200},`+
				`{"ID":"100002001","Name":"1Core-2GB","CPU":1,"MemoryMB":2048,"Commitment":"standard","Availability":"available","Generation":200}]}`)
		case strings.HasSuffix(r.URL.Path, "/api/cloud/1.1/server"):
			fmt.Fprint(w, `{"Total":0,"From":0,"Count":0,"Servers":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), paths...) }
}

// TestAPIRootURL: with api_root_url every call of the provider goes to
// that root (here a fake API the test serves) instead of Sakura's; the
// pre-flight checks the zone and each plan against the API's lists and
// says what is wrong. It runs in a child process: the SDK's in-process
// fake, which the other tests use, replaces the real client process-wide.
func TestAPIRootURL(t *testing.T) {
	srv, paths := fakeAPI(t)
	run := func(zone, memory string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAPIRootURLChild$", "-test.v")
		cmd.Env = append(os.Environ(), "SHOAL_SACLOUD_ROOT="+srv.URL+"/cloud/zone/", "SHOAL_SACLOUD_ZONE="+zone, "SHOAL_SACLOUD_MEMORY="+memory,
			iaas.APIAccessTokenEnvKey+"=token", iaas.APIAccessSecretEnvKey+"=secret")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if _, v, ok := strings.Cut(line, "RESULT "); ok {
				return strings.TrimSpace(v)
			}
		}
		t.Fatalf("no result in\n%s", out)
		return ""
	}
	// The template's plan (1 core, 1 GB) is sold; server_plans' medium
	// (2 cores, 4 GB) is not, by this API.
	got := run("tk1b", "1")
	for _, want := range []string{"listed 0 | API " + srv.URL + "/cloud/zone | ",
		"problems [sacloud: server_plans.medium: zone tk1b sells no standard plan of 2 cores and 4 GB memory; plans of 2 cores there: none]",
		"notes [zone tk1b listed by the API plan 1 cores / 1 GB sold in tk1b]"} {
		if !strings.Contains(got, want) {
			t.Errorf("pre-flight: %s\nwant it to contain %s", got, want)
		}
	}
	seen := strings.Join(paths(), "\n")
	for _, p := range []string{"GET /cloud/zone/tk1b/api/cloud/1.1/server", "GET /cloud/zone/is1a/api/cloud/1.1/zone", "GET /cloud/zone/tk1b/api/cloud/1.1/product/server"} {
		if !strings.Contains(seen, p) {
			t.Errorf("the fake API was not asked %s; it was asked:\n%s", p, seen)
		}
	}
	if got := run("tk1a", "1"); !strings.Contains(got, "problems [sacloud: zone tk1a is not in the API's list of zones (tk1b, tk1v): check zone]") {
		t.Errorf("pre-flight of a zone the API does not list: %s", got)
	}
	if got := run("tk1b", "3"); !strings.Contains(got, "template.plan: zone tk1b sells no standard plan of 1 cores and 3 GB memory; plans of 1 cores there: 1 GB, 2 GB") {
		t.Errorf("pre-flight of a plan the API does not sell: %s", got)
	}
}

// TestAPIRootURLChild is TestAPIRootURL's child process.
func TestAPIRootURLChild(t *testing.T) {
	root := os.Getenv("SHOAL_SACLOUD_ROOT")
	if root == "" {
		t.Skip("run by TestAPIRootURL")
	}
	doc := strings.Replace(seedProvider, "fake_mode: true\n    emulator: {stand_in: [app, \"--port={{.Port}}\"]}\n", "api_root_url: "+root+"\n", 1)
	doc = strings.Replace(doc, "zone: tk1b", "zone: "+os.Getenv("SHOAL_SACLOUD_ZONE"), 1)
	doc = strings.Replace(doc, "        memory: 1\n", "        memory: "+os.Getenv("SHOAL_SACLOUD_MEMORY")+"\n", 1)
	cfg := load(t, doc)
	d := newDriver(t, cfg)
	ctx := context.Background()
	list, err := d.List(ctx, "shoal-0123456789abcdef")
	if err != nil {
		fmt.Println("RESULT List:", err)
		return
	}
	where, problems, notes := d.Preflight(ctx)
	fmt.Printf("RESULT listed %d | %s | problems %v | notes %v\n", len(list), where, problems, notes)
}
