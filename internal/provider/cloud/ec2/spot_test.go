package ec2

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
)

// noSpotFor refuses spot requests of the types marked, as EC2 does with no
// spot capacity (moto never does), before they leave.
type noSpotFor map[types.InstanceType]bool

func (n noSpotFor) option(o *ec2.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("shoal-no-spot", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if r, ok := in.Parameters.(*ec2.RunInstancesInput); ok && n[r.InstanceType] && r.InstanceMarketOptions != nil {
				return middleware.InitializeOutput{}, middleware.Metadata{}, &smithy.GenericAPIError{Code: "InsufficientInstanceCapacity", Message: "There is no Spot capacity available that matches your request."}
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
	})
}

// TestSpotOnDemandBase: on the spot market with on_demand_base 2 a group's
// first two instances are on-demand and the rest spot (as moto lists their
// lifecycle); a spot request refused for capacity is made on-demand with
// fallback, and refused (retryable) without.
func TestSpotOnDemandBase(t *testing.T) {
	e := newMotoEnv(t)
	ctx := t.Context()
	mk := func(fallback bool, refuse noSpotFor) *Driver {
		cfg := Config{Region: region, Endpoint: e.endpoint, CredentialsFile: e.creds, Profile: "default", AMI: e.ami,
			InstanceType: "t3.micro", Address: AddressPrivate, Market: Spot, Spot: SpotOptions{OnDemandBase: 2, Fallback: fallback},
			InstanceTypes: map[string][]string{"big": {"m5.large"}}}
		d, err := newDriver(ctx, cfg, refuse.option)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	lifecycle := func(d *Driver, id string) string {
		out, err := d.client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
		if err != nil {
			t.Fatal(err)
		}
		if l := out.Reservations[0].Instances[0].InstanceLifecycle; l != "" {
			return string(l)
		}
		return "on-demand"
	}
	d := mk(true, noSpotFor{types.InstanceTypeM5Large: true})
	const owner = "owner-spot-base"
	var got []string
	for i := range 4 {
		s, err := d.Create(ctx, request(owner, fmt.Sprintf("web-%03d", i+1)))
		if err != nil {
			t.Fatalf("Create %d: %v", i+1, err)
		}
		got = append(got, lifecycle(d, s.ID))
	}
	if fmt.Sprint(got) != "[on-demand on-demand spot spot]" {
		t.Errorf("lifecycles %v, want the base of 2 on-demand, then spot", got)
	}
	// Spot refused for m5.large: on-demand instead.
	req := request(owner, "web-005")
	req.Plan = "big"
	s, err := d.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create with spot refused: %v", err)
	}
	if l := lifecycle(d, s.ID); l != "on-demand" {
		t.Errorf("spot refused, fallback: %s, want on-demand", l)
	}
	// Without fallback the refusal stands (retried by the provider).
	nd := mk(false, noSpotFor{types.InstanceTypeM5Large: true})
	req = request(owner, "web-006")
	req.Plan = "big"
	if _, err := nd.Create(ctx, req); err == nil {
		t.Error("spot refused without fallback: created anyway")
	}
}
