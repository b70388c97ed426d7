package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/shoal-lb/shoal/internal/compat/sacloud/autoscalerpb"
)

const compatTop = "compat:\n  sacloud_autoscaler:\n    listen: unix:autoscaler.sock\n"

// dialCompat connects like sacloud/autoscaler's clients do: plain gRPC over unix:PATH.
func dialCompat(t *testing.T, e *shoalEnv) pb.ScalingServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("unix:"+filepath.Join(e.stateDir(), "autoscaler.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check: %v %v, want SERVING", hc, err)
	}
	return pb.NewScalingServiceClient(conn)
}

func call(t *testing.T, f func(context.Context, *pb.ScalingRequest, ...grpc.CallOption) (*pb.ScalingResponse, error), req *pb.ScalingRequest) *pb.ScalingResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := f(ctx, req)
	if err != nil {
		t.Fatalf("%v: %v", req, err)
	}
	return resp
}

func wantStatus(t *testing.T, resp *pb.ScalingResponse, st pb.ScalingJobStatus, msg string) {
	t.Helper()
	if resp.GetStatus() != st || resp.GetScalingJobId() == "" {
		t.Fatalf("answer %v, want %v with a job id", resp, st)
	}
	if msg == "" && resp.GetMessage() != "" || !strings.Contains(resp.GetMessage(), msg) {
		t.Fatalf("message %q, want %q", resp.GetMessage(), msg)
	}
}

// TestSacloudCompatOneGroup drives one group the way the seed's cron script does.
func TestSacloudCompatOneGroup(t *testing.T) {
	parallel(t) // waits for scale jobs, no load
	e := newEnv(t, compatTop, web)
	e.start()
	e.waitInService("web", 2)
	c := dialCompat(t, e)
	fi, err := osStat(filepath.Join(e.stateDir(), "autoscaler.sock"))
	if err != nil || fi != 0o600 {
		t.Fatalf("compat socket mode %o, err %v; want 0600", fi, err)
	}

	// `direct up --resource-name web`: answered at once, then the job runs.
	resp := call(t, c.Up, &pb.ScalingRequest{Source: "default", ResourceName: "web"})
	wantStatus(t, resp, pb.ScalingJobStatus_JOB_ACCEPTED, "")
	j, err := e.client().Job(context.Background(), resp.GetScalingJobId(), time.Minute)
	if err != nil || j.State != "done" || j.Target != 3 {
		t.Fatalf("job %+v %v, want done at 3", j, err)
	}

	// Up with a plan, sync, through the "default" resource name.
	resp = call(t, c.Up, &pb.ScalingRequest{Source: "cron", ResourceName: "default", DesiredStateName: "largest", Sync: true})
	wantStatus(t, resp, pb.ScalingJobStatus_JOB_DONE, "")
	e.waitInService("web", 5)
	e.checkInSync("web")

	// Up to a smaller plan never scales down (the seed's "keep" branch).
	resp = call(t, c.Up, &pb.ScalingRequest{Source: "cron", ResourceName: "web", DesiredStateName: "smallest", Sync: true})
	wantStatus(t, resp, pb.ScalingJobStatus_JOB_IGNORED, "never scales down")

	// Up at the top: ignored with a reason.
	resp = call(t, c.Up, &pb.ScalingRequest{ResourceName: "web", Sync: true})
	wantStatus(t, resp, pb.ScalingJobStatus_JOB_IGNORED, "already at the largest plan")

	// Down one step, sync.
	resp = call(t, c.Down, &pb.ScalingRequest{ResourceName: "web", Sync: true})
	wantStatus(t, resp, pb.ScalingJobStatus_JOB_DONE, "")
	e.waitInService("web", 3)

	// Keep when nothing is missing: done, nothing to change.
	resp = call(t, c.Keep, &pb.ScalingRequest{ResourceName: "web", Sync: true})
	wantStatus(t, resp, pb.ScalingJobStatus_JOB_DONE_NOOP, "")

	// Keep after an instance was killed: the group is restored to 3.
	victim := e.status().Groups[0].Instances[1]
	if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.eventually("the kill is noticed", 10*time.Second, func() error {
		for _, in := range e.status().Groups[0].Instances {
			if in.PID == victim.PID {
				return context.DeadlineExceeded
			}
		}
		return nil
	})
	resp = call(t, c.Keep, &pb.ScalingRequest{Source: "healer", ResourceName: "web", Sync: true})
	if st := resp.GetStatus(); st != pb.ScalingJobStatus_JOB_DONE && st != pb.ScalingJobStatus_JOB_DONE_NOOP {
		t.Fatalf("keep after a kill: %v", resp)
	}
	e.waitInService("web", 3)
	e.checkInSync("web")

	// Unknown group and plan.
	_, err = c.Up(context.Background(), &pb.ScalingRequest{ResourceName: "nope"})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "web") {
		t.Fatalf("unknown group: %v, want NotFound naming web", err)
	}
	_, err = c.Up(context.Background(), &pb.ScalingRequest{ResourceName: "web", DesiredStateName: "huge"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "smallest, medium, largest") {
		t.Fatalf("unknown plan: %v, want InvalidArgument with the plans", err)
	}

	// Jobs made through gRPC show in `shoal jobs` with their source.
	out, _, code := e.cli("jobs", "--limit", "50")
	if code != 0 || !strings.Contains(out, "cron") || !strings.Contains(out, "healer") {
		t.Fatalf("shoal jobs does not show the gRPC sources:\n%s", out)
	}
}

// TestSacloudCompatConcurrentAndFailures: two groups, concurrent Ups, a job
// that fails, and a client that hangs up on a sync call.
func TestSacloudCompatConcurrentAndFailures(t *testing.T) {
	parallel(t) // waits for scale jobs, no load
	broken := groupSpec{Name: "broken", Min: 0, Max: 1, Command: `["/bin/sh", "-c", "exit 3"]`, Extra: "    path_prefixes: [/broken]\n"}
	e := newEnv(t, compatTop, groupSpec{Name: "web", Min: 1, Max: 3}, broken)
	e.start()
	e.waitInService("web", 1)
	c := dialCompat(t, e)

	// "default" with two groups is an error naming them.
	_, err := c.Up(context.Background(), &pb.ScalingRequest{ResourceName: "default"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "broken, web") {
		t.Fatalf("default with two groups: %v", err)
	}

	// Two concurrent Ups on one group: one runs, the other is ignored.
	var wg sync.WaitGroup
	answers := make([]*pb.ScalingResponse, 2)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = call(t, c.Up, &pb.ScalingRequest{ResourceName: "web", Sync: true})
		}()
	}
	wg.Wait()
	var done, ignored int
	for _, a := range answers {
		switch a.GetStatus() {
		case pb.ScalingJobStatus_JOB_DONE:
			done++
		case pb.ScalingJobStatus_JOB_IGNORED:
			ignored++
			if !strings.Contains(a.GetMessage(), "another job") {
				t.Fatalf("ignored with %q, want another job running", a.GetMessage())
			}
		}
	}
	if done != 1 || ignored != 1 {
		t.Fatalf("answers %v, want one DONE and one IGNORED", answers)
	}

	// A job whose instance cannot start fails, with the reason.
	resp := call(t, c.Up, &pb.ScalingRequest{Source: "alert", ResourceName: "broken", Sync: true})
	wantStatus(t, resp, pb.ScalingJobStatus_JOB_FAILED, "exit status 3")

	// A client that hangs up while waiting does not cancel the job.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err = c.Up(ctx, &pb.ScalingRequest{Source: "impatient", ResourceName: "web", Sync: true})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("sync call with a short deadline: %v", err)
	}
	e.eventually("the abandoned sync job finishes", time.Minute, func() error {
		list, err := e.client().Jobs(context.Background(), "web", 1)
		if err != nil {
			return err
		}
		if len(list) != 1 || list[0].Source != "impatient" || list[0].State != "done" {
			return fmt.Errorf("newest job %+v", list)
		}
		return nil
	})
	e.waitInService("web", 3)
}
