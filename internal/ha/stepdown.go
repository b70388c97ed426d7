package ha

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/ha/election"
)

// vipLeaveMax bounds how long a step-down without a handover (the VIP was
// not on this node) waits for the address to leave it.
const vipLeaveMax = 15 * time.Second

// leaderRise is how long the new leader's keepalived takes to add the
// leader's weight (its leader check runs every second and rises on one
// pass): until then a yielded node of higher base priority would take the
// VIP back.
const leaderRise = 2 * time.Second

// StepDown is POST /v1/ha/step-down: it hands the VIP over, drained (see
// keepalived.Handover: new connections held, each connection closed after
// its answer, the address moved once nothing is in flight), then the
// leadership, and returns the new leader ("" when none took over within
// two leases) and when the VIP left this node. From then the node may be
// taken down without cutting a client off.
//
//	standby ready? ──► hold SYNs, close after answer ──► quiet ──► yield:
//	VIP left ──► one advert (the standby takes it) ──► fence cleared,
//	resign ──► new leader ──► leaderRise ──► unyield
func (h *Node) StepDown(ctx context.Context) (api.StepDownResponse, error) {
	start := time.Now()
	r := h.el.Role()
	if !r.Leader {
		return api.StepDownResponse{}, api.ErrNotLeader
	}
	if err := h.standbyReady(ctx); err != nil {
		return api.StepDownResponse{}, err
	}
	var resp api.StepDownResponse
	yielded := false
	if h.ka != nil && h.ka.State() == "MASTER" {
		// No reload while HAProxy drains: a new worker would keep
		// connections alive.
		h.core.Lock()
		res, err := h.ka.Handover(ctx, h.lb)
		h.core.Unlock()
		if err != nil {
			return resp, fmt.Errorf("hand the VIP over: %w", err)
		}
		yielded = true
		resp.VIPMoved, resp.VIPMovedAfter = true, res.Left.Seconds()
		lg := h.log.Info
		if !res.Quiet {
			lg = h.log.Warn
		}
		lg("step-down: the VIP left this node", "drained", res.Drained.Round(time.Millisecond), "quiet", res.Quiet, "after", res.Left.Round(time.Millisecond))
		// The standby takes the address its skew time (under one advert)
		// after our priority-0 advert. Resigning sooner would let its
		// leader check pass within that time, and a change of priority
		// restarts a backup's master-down timer: the address would be no
		// one's for three adverts, and the SYNs held through the move
		// would wait for their second retransmission (seen in about one
		// step-down in four).
		select {
		case <-ctx.Done():
			return resp, ctx.Err()
		case <-time.After(h.vip.Advert):
		}
	}
	defer func() {
		if yielded {
			if err := h.ka.Unyield(); err != nil {
				h.log.Error("step-down: letting keepalived hold the VIP again failed", "err", err)
			}
		}
	}()
	// Nothing this node still does writes once the other may lead: the
	// fence goes before the election key.
	h.shared.SetFence(election.Fence{})
	if err := h.el.StepDown(ctx); err != nil {
		if now := h.el.Role(); now.Leader && now.Fence == r.Fence {
			h.shared.SetFence(r.Fence)
		}
		if errors.Is(err, election.ErrNotLeader) {
			return resp, api.ErrNotLeader
		}
		return resp, err
	}
	if err := poll(ctx, start.Add(2*h.lease), func() bool {
		if r := h.el.Role(); r.LeaderName != "" && r.LeaderName != h.el.Name() {
			resp.Leader = r.LeaderName
			return true
		}
		return false
	}); err != nil || h.ka == nil {
		return resp, err
	}
	if yielded {
		if resp.Leader != "" {
			select {
			case <-ctx.Done():
				return resp, ctx.Err()
			case <-time.After(leaderRise):
			}
		}
		return resp, nil
	}
	err := poll(ctx, start.Add(vipLeaveMax), func() bool { return h.ka.State() != "MASTER" })
	if resp.VIPMoved = h.ka.State() != "MASTER"; resp.VIPMoved {
		resp.VIPMovedAfter = time.Since(start).Seconds()
		h.log.Info("step-down: the VIP left this node", "after", time.Since(start).Round(time.Millisecond))
	} else {
		h.log.Warn("step-down: the VIP is still on this node", "after", time.Since(start).Round(time.Millisecond))
	}
	return resp, err
}

// standbyReady returns api.ErrNoStandby, saying why, unless another node
// published within two leases that its HAProxy is synced: a handover to a
// node whose servers are still DOWN would queue every request it takes.
func (h *Node) standbyReady(ctx context.Context) error {
	st, err := h.el.Status(ctx)
	if err != nil {
		return fmt.Errorf("read the pair from etcd: %w", err)
	}
	var why []string
	for _, n := range st.Nodes {
		switch {
		case n.Name == h.el.Name():
		case time.Since(n.UpdatedAt) > 2*h.lease:
			why = append(why, fmt.Sprintf("%s last reported %s ago", n.Name, time.Since(n.UpdatedAt).Round(time.Second)))
		case !n.HAProxySynced:
			why = append(why, fmt.Sprintf("%s's HAProxy does not have every instance UP yet", n.Name))
		case h.ka != nil && n.VIP != "BACKUP":
			// A yield to a node that cannot hold the VIP would leave it
			// to no one.
			why = append(why, fmt.Sprintf("%s's keepalived is %q, not BACKUP", n.Name, n.VIP))
		default:
			return nil
		}
	}
	if len(why) == 0 {
		why = append(why, "no other node is registered")
	}
	return fmt.Errorf("%w: %s", api.ErrNoStandby, strings.Join(why, "; "))
}

// poll checks done every 50 ms until it holds or deadline passes (nil
// either way), or ctx ends.
func poll(ctx context.Context, deadline time.Time, done func() bool) error {
	for !done() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
