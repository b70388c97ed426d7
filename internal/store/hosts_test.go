package store

import (
	"testing"
	"time"
)

func TestCordonedHosts(t *testing.T) {
	s, path := openTest(t)
	ctx := t.Context()
	since := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	for _, h := range []CordonedHost{{"ssh", "h2", since, false}, {"ssh", "h1", since.Add(time.Minute), false}, {"bare", "z", since, false}} {
		if added, err := s.CordonHost(ctx, h); err != nil || !added {
			t.Fatalf("cordon %+v: %v %v", h, added, err)
		}
	}
	if added, err := s.CordonHost(ctx, CordonedHost{"ssh", "h2", since.Add(time.Hour), false}); err != nil || added {
		t.Errorf("cordoning a cordoned host: added %v, %v", added, err)
	}
	if removed, err := s.UncordonHost(ctx, "ssh", "h1"); err != nil || !removed {
		t.Errorf("uncordon h1: %v %v", removed, err)
	}
	if removed, err := s.UncordonHost(ctx, "ssh", "h1"); err != nil || removed {
		t.Errorf("uncordon h1 twice: %v %v", removed, err)
	}
	// A drain in progress is marked on its cordon; a host not cordoned
	// has no record to mark.
	if found, err := s.SetHostDraining(ctx, "ssh", "h2", true); err != nil || !found {
		t.Errorf("mark h2 draining: %v %v", found, err)
	}
	if found, err := s.SetHostDraining(ctx, "ssh", "h1", true); err != nil || found {
		t.Errorf("mark h1 (uncordoned) draining: %v %v", found, err)
	}
	s.Close()

	// A restart finds them.
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err := s2.CordonedHosts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []CordonedHost{{"bare", "z", since, false}, {"ssh", "h2", since, true}}
	if len(got) != len(want) {
		t.Fatalf("cordoned = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Provider != want[i].Provider || got[i].Host != want[i].Host || !got[i].Since.Equal(want[i].Since) || got[i].Draining != want[i].Draining {
			t.Errorf("cordoned[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestInstanceTemplate(t *testing.T) {
	s, _ := openTest(t)
	ctx := t.Context()
	in := Instance{Version: "v1", Template: "3f2a"}
	in.Name, in.Group = "web-1", "web"
	if err := s.PutInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	got, err := s.Instances(ctx)
	if err != nil || len(got) != 1 || got[0].Template != "3f2a" {
		t.Fatalf("instances = %+v, %v", got, err)
	}
}
