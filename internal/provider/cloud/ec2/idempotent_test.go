package ec2

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmw "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/shoal-lb/shoal/internal/provider/cloud"
)

// lostAnswer drops moto's answer to the first RunInstances after moto has
// acted on it, as a connection reset after the request went out would,
// and records each RunInstances request.
type lostAnswer struct {
	mu      sync.Mutex
	dropped bool
	runs    []*ec2.RunInstancesInput
}

func (l *lostAnswer) option(o *ec2.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		if err := s.Initialize.Add(middleware.InitializeMiddlewareFunc("shoal-record", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if r, ok := in.Parameters.(*ec2.RunInstancesInput); ok {
				l.mu.Lock()
				l.runs = append(l.runs, r)
				l.mu.Unlock()
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.Before); err != nil {
			return err
		}
		return s.Finalize.Add(middleware.FinalizeMiddlewareFunc("shoal-drop", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleFinalize(ctx, in)
			l.mu.Lock()
			drop := !l.dropped && err == nil && awsmw.GetOperationName(ctx) == "RunInstances"
			l.dropped = l.dropped || drop
			l.mu.Unlock()
			if drop {
				return middleware.FinalizeOutput{}, md, &smithyhttp.RequestSendError{Err: errors.New("connection reset by peer (the test dropped the answer)")}
			}
			return out, md, err
		}), middleware.After)
	})
}

// TestCreateIdempotent: the answer to a create is lost after moto made the
// instance; the provider retries, and the group gets that instance, not a
// second one. Every attempt carries the same ClientToken, and the tags go
// on the instance's volume and network interface too.
func TestCreateIdempotent(t *testing.T) {
	e := newMotoEnv(t)
	lost := &lostAnswer{}
	cfg := Config{Region: region, Endpoint: e.endpoint, CredentialsFile: e.creds, Profile: "default", Market: OnDemand,
		AMI: e.ami, InstanceType: "t3.micro", Subnet: e.subnet, Address: AddressPrivate, Tags: map[string]string{"team": "web"}}
	d, err := newDriver(t.Context(), cfg, e.calls.option, lost.option)
	if err != nil {
		t.Fatal(err)
	}
	const owner = "owner-idem"
	p := runProvider(t, d, owner, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in, err := p.Start(ctx, spec("web-001", 1))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() { _ = p.Delete(context.Background(), in) }()

	lost.mu.Lock()
	runs, dropped := lost.runs, lost.dropped
	lost.mu.Unlock()
	if !dropped {
		t.Fatal("the first RunInstances answer was not dropped")
	}
	// The retry found the instance by its token before creating: one
	// RunInstances in all.
	if len(runs) != 1 {
		t.Errorf("%d RunInstances calls, want 1 (the retry finds the first attempt's instance)", len(runs))
	}
	tok := aws.ToString(runs[0].ClientToken)
	if tok == "" {
		t.Fatal("RunInstances without a ClientToken")
	}
	servers := listed(t, d, owner)
	if len(servers) != 1 {
		t.Fatalf("moto has %d instances for the owner, want 1: %+v", len(servers), servers)
	}
	s, ok := servers[in.Record().ID]
	if !ok || s.Tags[TagToken] != tok {
		t.Errorf("instance %s listed as %+v, want the token %s", in.Record().ID, s, tok)
	}

	// Tags on the volume (moto tags volumes at launch; it does not tag
	// network interfaces, so for those the request is what is checked).
	vols, err := d.client.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{Filters: []types.Filter{
		{Name: aws.String("attachment.instance-id"), Values: []string{s.ID}},
	}})
	if err != nil || len(vols.Volumes) == 0 {
		t.Fatalf("DescribeVolumes: %v, %d volumes", err, len(vols.Volumes))
	}
	vt := map[string]string{}
	for _, tg := range vols.Volumes[0].Tags {
		vt[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
	}
	for k, v := range map[string]string{"Name": "web-001", cloud.TagOwner: owner, cloud.TagInstance: "web-001", "team": "web"} {
		if vt[k] != v {
			t.Errorf("volume tag %s = %q, want %q (all: %v)", k, vt[k], v, vt)
		}
	}
	kinds := map[types.ResourceType]int{}
	for _, ts := range runs[0].TagSpecifications {
		kinds[ts.ResourceType] = len(ts.Tags)
	}
	for _, rt := range []types.ResourceType{types.ResourceTypeInstance, types.ResourceTypeVolume, types.ResourceTypeNetworkInterface} {
		if kinds[rt] != kinds[types.ResourceTypeInstance] || kinds[rt] == 0 {
			t.Errorf("tag specifications %v: want the same tags on instance, volume and network-interface", kinds)
		}
	}
}
