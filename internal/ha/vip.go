package ha

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/shoal-lb/shoal/internal/ha/keepalived"
)

// StartVIP runs keepalived for the pair's virtual IP, if the config has
// one, its track scripts this binary's `shoal ha check` against the core's
// socket: a node whose core or HAProxy does not answer gives the address
// up, and the leader's check raises its priority so that the address
// follows it. The returned func stops keepalived, handing the address over;
// without a VIP it does nothing. Call it before Start.
func (h *Node) StartVIP(ctx context.Context) (func(), error) {
	if h.vip == nil {
		return func() {}, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("keepalived: the track scripts need shoal's own path: %w", err)
	}
	check := []string{self, "ha", "check", "--socket", h.cfg.Admin.Socket}
	ka, err := keepalived.Start(ctx, keepalived.Options{
		VIP:         *h.vip,
		Priority:    h.cfg.HA.Priority,
		Node:        h.cfg.HA.Node,
		Dir:         filepath.Join(h.cfg.StateDir, "keepalived"),
		Check:       check,
		LeaderCheck: append(slices.Clip(check), "--leader"),
		Log:         h.base,
	})
	if err != nil {
		return nil, err
	}
	h.ka = ka
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ka.Stop(ctx); err != nil {
			h.base.Warn("stopping keepalived failed", "err", err)
		}
	}, nil
}
