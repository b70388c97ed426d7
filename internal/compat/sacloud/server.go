// Package sacloud serves sacloud/autoscaler's gRPC ScalingService so that its
// own clients (`autoscaler inputs direct`, and its Grafana, Alertmanager,
// Zabbix and webhook input servers) drive shoal unchanged. Every call becomes a
// job through the same job manager as the CLI and API.
package sacloud

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/shoal-lb/shoal/internal/compat/sacloud/autoscalerpb"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/connlimit"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/unixsock"
)

// defaultName is what the clients send when the operator named nothing.
const defaultName = "default"

// maxRecvMsg bounds a request message; real ones are a few dozen bytes, and
// the bound keeps a client from making the server buffer megabytes.
const maxRecvMsg = 64 << 10

// Field limits: source as the job manager records it, names as long as a
// group or plan name can be with room to spare.
const (
	maxSource = 128
	maxName   = 64
)

// TCP connections: bounded in number (in all and per address: the
// protocol has no token to keep room for), and cut when they do not finish
// the HTTP/2 handshake in time or carry no call for long.
var tcpConns = connlimit.Limits{Max: 128, PerSource: 32}

const (
	handshakeLimit = 5 * time.Second
	idleLimit      = time.Minute
)

// stopGrace bounds how long shutdown waits for calls in flight; sync calls
// waiting on a job end when the job manager stops.
const stopGrace = 2 * time.Second

// Server is the compatibility frontend.
type Server struct {
	cfg config.SacloudAutoscaler
	log *slog.Logger
}

// New returns a server for cfg.
func New(cfg config.SacloudAutoscaler, log *slog.Logger) *Server {
	return &Server{cfg: cfg, log: log.With("component", "sacloud-autoscaler")}
}

// Serve listens and answers until ctx ends, submitting to m jobs for the
// groups it finds in groups.
func (s *Server) Serve(ctx context.Context, m *jobrun.Manager, groups jobrun.Groups) error {
	l, err := s.listen()
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(maxRecvMsg), grpc.ConnectionTimeout(handshakeLimit),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idleLimit}))
	autoscalerpb.RegisterScalingServiceServer(srv, &scaling{jobs: m, groups: groups, log: s.log})
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(autoscalerpb.ScalingService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	s.log.Info("sacloud/autoscaler compatible gRPC server started", "address", s.cfg.Network+":"+s.cfg.Address)
	select {
	case err := <-errc:
		return fmt.Errorf("sacloud/autoscaler gRPC server: %w", err)
	case <-ctx.Done():
	}
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(stopGrace):
		srv.Stop()
	}
	return nil
}

func (s *Server) listen() (net.Listener, error) {
	if s.cfg.Network == "unix" {
		mode := os.FileMode(s.cfg.SocketMode)
		if mode == 0 {
			mode = 0o600
		}
		return unixsock.Listen(s.cfg.Address, mode, s.cfg.SocketGroup)
	}
	l, err := net.Listen("tcp", s.cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("compat.sacloud_autoscaler.listen: %w", err)
	}
	return connlimit.New(l, "compat.sacloud_autoscaler.listen", tcpConns, s.log), nil
}

type scaling struct {
	autoscalerpb.UnimplementedScalingServiceServer
	jobs   *jobrun.Manager
	groups jobrun.Groups
	log    *slog.Logger
}

func (h *scaling) Up(ctx context.Context, req *autoscalerpb.ScalingRequest) (*autoscalerpb.ScalingResponse, error) {
	return h.handle(ctx, "Up", jobrun.Up, req)
}

func (h *scaling) Down(ctx context.Context, req *autoscalerpb.ScalingRequest) (*autoscalerpb.ScalingResponse, error) {
	return h.handle(ctx, "Down", jobrun.Down, req)
}

func (h *scaling) Keep(ctx context.Context, req *autoscalerpb.ScalingRequest) (*autoscalerpb.ScalingResponse, error) {
	return h.handle(ctx, "Keep", jobrun.Keep, req)
}

// checkRequest bounds every field before anything logs or echoes it.
func checkRequest(req *autoscalerpb.ScalingRequest) error {
	for _, f := range []struct {
		name, val string
		max       int
	}{
		{"source", req.GetSource(), maxSource},
		{"resource_name", req.GetResourceName(), maxName},
		{"desired_state_name", req.GetDesiredStateName(), maxName},
	} {
		if len(f.val) > f.max {
			return status.Errorf(codes.InvalidArgument, "%s must be at most %d bytes, got %d", f.name, f.max, len(f.val))
		}
		if !utf8.ValidString(f.val) || strings.ContainsFunc(f.val, unicode.IsControl) {
			return status.Errorf(codes.InvalidArgument, "%s must be printable UTF-8 text without control characters", f.name)
		}
	}
	return nil
}

func (h *scaling) handle(ctx context.Context, method string, kind jobrun.Kind, req *autoscalerpb.ScalingRequest) (*autoscalerpb.ScalingResponse, error) {
	if err := checkRequest(req); err != nil {
		h.log.Warn("request refused", "request", method, "err", err)
		return nil, err
	}
	source := req.GetSource()
	if source == "" {
		source = defaultName
	}
	log := h.log.With("request", method, "source", source, "resource", req.GetResourceName(), "desired_state", req.GetDesiredStateName(), "sync", req.GetSync())
	log.Info("request received")

	groupName, err := h.groupName(req.GetResourceName())
	if err != nil {
		log.Warn("request refused", "err", err)
		return nil, err
	}
	r := jobrun.Request{Group: groupName, Kind: kind, Source: source}
	if plan := req.GetDesiredStateName(); plan != "" && plan != defaultName {
		g, ok := h.groups.Group(groupName)
		if !ok { // removed by a config reload meanwhile
			return nil, status.Errorf(codes.NotFound, "group %s was removed", groupName)
		}
		cfg := g.Config()
		if _, ok := cfg.PlanByName(plan); !ok {
			err := status.Errorf(codes.InvalidArgument, "unknown desired_state_name %q for %s (plans: %s)", plan, groupName, strings.Join(cfg.PlanNames(), ", "))
			log.Warn("request refused", "err", err)
			return nil, err
		}
		// Keep restores the current size; a plan only says where Up and Down go.
		if kind != jobrun.Keep {
			r.Plan = plan
		}
	}

	// The job must not depend on this call: a client that hangs up while
	// waiting leaves the job running.
	job, err := h.jobs.Submit(context.WithoutCancel(ctx), r)
	var inErr *jobrun.InputError
	if errors.As(err, &inErr) {
		return nil, status.Error(codes.InvalidArgument, inErr.Msg)
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if req.GetSync() && !job.State.Terminal() {
		job, err = h.jobs.Wait(ctx, job.ID)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if !job.State.Terminal() {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	resp := response(job)
	log.Info("request answered", "job", job.ID, "status", resp.GetStatus().String(), "message", resp.GetMessage())
	return resp, nil
}

// groupName resolves resource_name: "" and "default" mean the only group.
func (h *scaling) groupName(resource string) (string, error) {
	names := h.groups.Names()
	if resource == "" || resource == defaultName {
		if len(names) == 1 {
			return names[0], nil
		}
		return "", status.Errorf(codes.InvalidArgument, "resource_name is required: shoal has %d groups (%s)", len(names), strings.Join(names, ", "))
	}
	if _, ok := h.groups.Group(resource); !ok {
		return "", status.Errorf(codes.NotFound, "unknown resource_name %q (groups: %s)", resource, strings.Join(names, ", "))
	}
	return resource, nil
}

// response maps a job onto the protocol's status and message. Only ignored and
// failed jobs carry a message: the `direct` client exits 130 on any message.
func response(j jobrun.Job) *autoscalerpb.ScalingResponse {
	r := &autoscalerpb.ScalingResponse{ScalingJobId: j.ID}
	switch j.State {
	case jobrun.Accepted:
		r.Status = autoscalerpb.ScalingJobStatus_JOB_ACCEPTED
	case jobrun.Running:
		r.Status = autoscalerpb.ScalingJobStatus_JOB_RUNNING
	case jobrun.Done:
		r.Status = autoscalerpb.ScalingJobStatus_JOB_DONE
		if j.Noop {
			r.Status = autoscalerpb.ScalingJobStatus_JOB_DONE_NOOP
		}
	case jobrun.Ignored:
		r.Status, r.Message = autoscalerpb.ScalingJobStatus_JOB_IGNORED, j.Reason
	case jobrun.Failed:
		r.Status, r.Message = autoscalerpb.ScalingJobStatus_JOB_FAILED, j.Reason
	}
	return r
}
