package ec2

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go/middleware"
)

// TestSpotInterruptionNotice: a spot instance whose request EC2 marks for
// termination (the two-minute notice) is listed Interrupted, from one
// DescribeSpotInstanceRequests per listing. Moto runs the spot instance
// and its request; it never interrupts one, so the test answers the
// marked request's status itself, as EC2 does during the notice (the
// request names its instance).
func TestSpotInterruptionNotice(t *testing.T) {
	e := newMotoEnv(t)
	ctx := t.Context()
	var marked atomic.Value // the instance whose request to answer as marked
	marked.Store("")
	var asked atomic.Int32
	answer := func(o *ec2.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("shoal-notice", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				r, ok := in.Parameters.(*ec2.DescribeSpotInstanceRequestsInput)
				if !ok {
					return next.HandleInitialize(ctx, in)
				}
				asked.Add(1)
				if len(r.Filters) != 1 || aws.ToString(r.Filters[0].Name) != "status-code" || r.Filters[0].Values[0] != "marked-for-termination" {
					t.Errorf("DescribeSpotInstanceRequests filters %+v", r.Filters)
				}
				out := &ec2.DescribeSpotInstanceRequestsOutput{}
				if id := marked.Load().(string); id != "" {
					out.SpotInstanceRequests = []types.SpotInstanceRequest{{SpotInstanceRequestId: aws.String("sir-marked"), InstanceId: aws.String(id),
						Status: &types.SpotInstanceStatus{Code: aws.String("marked-for-termination")}}}
				}
				return middleware.InitializeOutput{Result: out}, middleware.Metadata{}, nil
			}), middleware.Before)
		})
	}
	cfg := Config{Region: region, Endpoint: e.endpoint, CredentialsFile: e.creds, Profile: "default", AMI: e.ami,
		InstanceType: "t3.micro", Address: AddressPrivate, Market: Spot}
	d, err := newDriver(ctx, cfg, answer)
	if err != nil {
		t.Fatal(err)
	}
	const owner = "owner-notice"
	// Moto gives an instance RunInstances launched on the spot market no
	// spot request: the instance of a RequestSpotInstances, tagged as
	// shoal tags its own, stands for it.
	setup := e.driver(t, Config{})
	sr, err := setup.client.RequestSpotInstances(ctx, &ec2.RequestSpotInstancesInput{
		InstanceCount:       aws.Int32(1),
		LaunchSpecification: &types.RequestSpotLaunchSpecification{ImageId: aws.String(e.ami), InstanceType: types.InstanceTypeT3Micro},
	})
	if err != nil || len(sr.SpotInstanceRequests) != 1 {
		t.Fatalf("RequestSpotInstances: %v", err)
	}
	req := aws.ToString(sr.SpotInstanceRequests[0].SpotInstanceRequestId)
	got, err := setup.client.DescribeSpotInstanceRequests(ctx, &ec2.DescribeSpotInstanceRequestsInput{SpotInstanceRequestIds: []string{req}})
	if err != nil || len(got.SpotInstanceRequests) != 1 || aws.ToString(got.SpotInstanceRequests[0].InstanceId) == "" {
		t.Fatalf("DescribeSpotInstanceRequests: %+v, %v; want the request fulfilled", got, err)
	}
	id := aws.ToString(got.SpotInstanceRequests[0].InstanceId)
	if _, err := setup.client.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: []types.Tag{
		{Key: aws.String("shoal-owner"), Value: aws.String(owner)}, {Key: aws.String("Name"), Value: aws.String("web-001")},
	}}); err != nil {
		t.Fatal(err)
	}
	list, err := d.List(ctx, owner)
	if err != nil || len(list) != 1 || list[0].Interrupted != "" {
		t.Fatalf("List before the notice: %+v, %v", list, err)
	}
	marked.Store(id)
	list, err = d.List(ctx, owner)
	if err != nil || len(list) != 1 || !strings.Contains(list[0].Interrupted, "marked-for-termination") {
		t.Fatalf("List during the notice: %+v, %v; want it interrupted", list, err)
	}
	if asked.Load() != 2 {
		t.Errorf("%d DescribeSpotInstanceRequests for 2 listings, want one each", asked.Load())
	}
}
