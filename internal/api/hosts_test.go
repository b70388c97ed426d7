package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/shoal-lb/shoal/internal/provider"
	"github.com/shoal-lb/shoal/internal/store"
)

// scriptedHosts answers each host by a fixed error, or acts on "ok".
type scriptedHosts struct {
	errs map[string]error
	got  []HostRequest
}

func (s *scriptedHosts) answer(req HostRequest, msg string) (HostResponse, error) {
	s.got = append(s.got, req)
	if err := s.errs[req.Host]; err != nil {
		return HostResponse{}, err
	}
	return HostResponse{Host: provider.HostStatus{Provider: "rack", Name: req.Host}, Changed: true, Message: msg}, nil
}

func (s *scriptedHosts) CordonHost(_ context.Context, req HostRequest, on bool) (HostResponse, error) {
	return s.answer(req, fmt.Sprintf("cordon %v", on))
}

func (s *scriptedHosts) DrainHost(_ context.Context, req HostRequest) (HostResponse, error) {
	return s.answer(req, "drain")
}

func (s *scriptedHosts) HostDrains() []HostDrain { return nil }

// TestHostActs: each host act's errors answer with their status and the
// error's words; the provider in the body reaches the act.
func TestHostActs(t *testing.T) {
	s := &scriptedHosts{errs: map[string]error{
		"nosuch": fmt.Errorf("%w %q: no provider has it", ErrUnknownHost, "nosuch"),
		"twin":   fmt.Errorf("%w %q: providers a, b each have one", ErrAmbiguousHost, "twin"),
		"busy":   fmt.Errorf("%w: busy", ErrDrainRunning),
		"fenced": fmt.Errorf("cordon host rack/fenced: %w", store.ErrNoFence),
		"old":    fmt.Errorf("%w: host old is cordoned", ErrNoReplace),
		"broken": errors.New("disk full"),
	}}
	c := serveUnix(t, NewHandler(nil, nil, slog.New(slog.DiscardHandler), "", WithHostActs(s)))
	ctx := context.Background()
	for host, want := range map[string]int{
		"nosuch": http.StatusNotFound, "twin": http.StatusBadRequest, "busy": http.StatusConflict,
		"fenced": http.StatusConflict, "old": http.StatusNotImplemented, "broken": http.StatusInternalServerError,
	} {
		for _, act := range []string{"cordon", "uncordon", "drain"} {
			_, err := c.HostAct(ctx, act, host, "")
			var ae *Error
			if !errors.As(err, &ae) || ae.Status != want || !strings.Contains(ae.Error(), s.errs[host].Error()) {
				t.Errorf("%s %s: %v, want %d with %q", act, host, err, want, s.errs[host])
			}
		}
	}
	resp, err := c.HostAct(ctx, "uncordon", "h1", "rack")
	if err != nil || resp.Message != "cordon false" || s.got[len(s.got)-1] != (HostRequest{Host: "h1", Provider: "rack"}) {
		t.Errorf("uncordon h1: %+v %v; request %+v", resp, err, s.got[len(s.got)-1])
	}
	if ds, err := c.HostDrains(ctx); err != nil || ds == nil || len(ds) != 0 {
		t.Errorf("no drains: %v %v, want []", ds, err)
	}
	// A body with an unknown field is refused before any act.
	before := len(s.got)
	var out HostResponse
	err = c.do(ctx, http.MethodPost, "/v1/hosts/h1/cordon", map[string]string{"host": "h2"}, &out)
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || len(s.got) != before {
		t.Errorf("unknown field: %v", err)
	}
}
