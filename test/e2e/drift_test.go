package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/group"
)

// TestDriftMarked: an instance started from another template than the
// serving one is marked drifted in `shoal status -o json` (and its text),
// during a deploy and after shoal is killed mid-deploy and restarted (the
// serving template is still the old one, the new instance's record keeps
// the template it started from); the others are not.
func TestDriftMarked(t *testing.T) {
	parallel(t)
	// min_ready holds the deploy after its first new instance serves.
	// The restart finds one instance too many (the deploy's surge) and
	// retires one: the oldest, so the drifted one stays to be looked at.
	g := deployGroup(2, "{max_surge: 1, min_ready: 60s, failure_threshold: 1}", "")
	g.Extra += "    scale_in: oldest\n"
	e := newEnv(t, "", g)
	e.start()
	e.waitInService("web", 2)
	before := groupOf(t, e.status(), "web")
	if before.Template == "" {
		t.Fatalf("status has no serving template hash: %+v", before)
	}
	for _, in := range before.Instances {
		if in.Template != before.Template || in.Drifted {
			t.Fatalf("before any change %s has template %q drifted %v, serving %q", in.Name, in.Template, in.Drifted, before.Template)
		}
	}

	if out, stderr, code := e.cli("deploy", "web", "--set", "release=2"); code != 0 {
		t.Fatalf("deploy exited %d:\n%s%s", code, out, stderr)
	}
	var drifted string
	e.eventually("a new instance of the deploy serves", 60*time.Second, func() error {
		g := groupOf(t, e.status(), "web")
		for _, in := range g.Instances {
			if in.Version != before.Version && in.State == group.InService {
				drifted = in.Name
				return nil
			}
		}
		return fmt.Errorf("instances %+v", g.Instances)
	})

	check := func(when string) {
		t.Helper()
		out, stderr, code := e.cli("status", "-o", "json")
		if code != 0 {
			t.Fatalf("%s: status -o json exited %d: %s", when, code, stderr)
		}
		var st api.StatusResponse
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("%s: decode status: %v\n%s", when, err, out)
		}
		g := groupOf(t, st, "web")
		if g.Template != before.Template {
			t.Fatalf("%s: serving template %q, want the old %q (the deploy did not finish)", when, g.Template, before.Template)
		}
		n := 0
		for _, in := range g.Instances {
			want := in.Name == drifted
			if in.Drifted != want || (want && in.Template == g.Template) {
				t.Errorf("%s: %s drifted %v (template %q, serving %q), want %v", when, in.Name, in.Drifted, in.Template, g.Template, want)
			}
			if in.Drifted {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d drifted instances, want 1 (%s)", when, n, drifted)
		}
		text, _, _ := e.cli("status")
		if !strings.Contains(text, "(drifted)") {
			t.Errorf("%s: shoal status does not mark the drifted instance:\n%s", when, text)
		}
	}
	check("during the deploy")

	// Killed mid-deploy: the restart serves the old template and adopts
	// the new instance, which is still drifted.
	e.kill9()
	e.start()
	e.eventually("the instances are adopted and the surplus gone", 30*time.Second, func() error {
		g := groupOf(t, e.status(), "web")
		found := false
		for _, in := range g.Instances {
			found = found || in.Name == drifted && in.State == group.InService
		}
		if !found || len(g.Instances) != 2 {
			return fmt.Errorf("want %s and one more: %+v", drifted, g.Instances)
		}
		return nil
	})
	check("after kill -9 and a restart")
}
