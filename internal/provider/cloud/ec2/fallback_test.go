package ec2

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/shoal-lb/shoal/internal/provider/cloud"
)

// noCapacityFor answers RunInstances of the given instance types as EC2
// does when it has no capacity (which moto never does), before the request
// leaves, and records every RunInstances' type and token.
type noCapacityFor struct {
	refuse map[types.InstanceType]bool
	mu     sync.Mutex
	tried  []string
}

func (n *noCapacityFor) option(o *ec2.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("shoal-no-capacity", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if r, ok := in.Parameters.(*ec2.RunInstancesInput); ok {
				n.mu.Lock()
				n.tried = append(n.tried, string(r.InstanceType)+" "+aws.ToString(r.ClientToken))
				n.mu.Unlock()
				if n.refuse[r.InstanceType] {
					return middleware.InitializeOutput{}, middleware.Metadata{}, &smithy.GenericAPIError{
						Code: "InsufficientInstanceCapacity", Message: "We currently do not have sufficient " + string(r.InstanceType) + " capacity in the Availability Zone you requested.",
					}
				}
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
	})
}

// TestInstanceTypeFallback: a plan's instance types are tried in order
// when EC2 has no capacity for one; each with a token of its own; when
// none has capacity the create is refused as retryable, naming them.
func TestInstanceTypeFallback(t *testing.T) {
	e := newMotoEnv(t)
	refuse := &noCapacityFor{refuse: map[types.InstanceType]bool{types.InstanceTypeT3Small: true, types.InstanceTypeM5Large: true}}
	cfg := Config{Region: region, Endpoint: e.endpoint, CredentialsFile: e.creds, Profile: "default", Market: OnDemand, AMI: e.ami,
		InstanceType: "t3.micro", Address: AddressPrivate,
		InstanceTypes: map[string][]string{"medium": {"t3.small", "t3a.small"}, "large": {"m5.large"}}}
	d, err := newDriver(t.Context(), cfg, refuse.option)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	req := request("owner-fallback", "web-001")
	req.Plan, req.Token, req.Attempt = "medium", "tok-medium", 1
	s, err := d.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create medium: %v", err)
	}
	out, err := d.client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{s.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Reservations[0].Instances[0].InstanceType; got != types.InstanceTypeT3aSmall {
		t.Errorf("medium launched as %s, want the fallback t3a.small", got)
	}
	refuse.mu.Lock()
	tried := strings.Join(refuse.tried, ", ")
	refuse.mu.Unlock()
	if tried != "t3.small tok-medium, t3a.small tok-medium-1" {
		t.Errorf("tried %s; want t3.small then t3a.small, each with its token", tried)
	}

	req = request("owner-fallback", "web-002")
	req.Plan = "large"
	_, err = d.Create(ctx, req)
	if !errors.Is(err, cloud.ErrRetryable) || !strings.Contains(err.Error(), "InsufficientInstanceCapacity") {
		t.Errorf("Create large with no capacity: %v; want a retryable InsufficientInstanceCapacity", err)
	}
	if list, err := d.List(ctx, "owner-fallback"); err != nil || len(list) != 1 {
		t.Errorf("List: %d instances, %v; want only web-001", len(list), err)
	}
}
