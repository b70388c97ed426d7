package ec2

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// TestSubnetsAndUserData: with three subnets (moto's default VPC has one
// per availability zone) a group's instances are spread evenly, each
// listed with its zone, which the provider gives its group (Zone) for
// scale-in; and each instance's user data is user_data expanded with its
// fields, base64 on the wire.
func TestSubnetsAndUserData(t *testing.T) {
	e := newMotoEnv(t)
	ctx := t.Context()
	d0 := e.driver(t, Config{})
	out, err := d0.client.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []types.Filter{{Name: aws.String("default-for-az"), Values: []string{"true"}}}})
	if err != nil || len(out.Subnets) < 3 {
		t.Fatalf("DescribeSubnets: %v, %d subnets", err, len(out.Subnets))
	}
	zoneOf := map[string]string{}
	var subnets []string
	for _, s := range out.Subnets[:3] {
		subnets = append(subnets, aws.ToString(s.SubnetId))
		zoneOf[aws.ToString(s.SubnetId)] = aws.ToString(s.AvailabilityZone)
	}
	cfg := Config{AMI: e.ami, InstanceType: "t3.micro", Subnets: subnets, Address: AddressPrivate,
		UserData: "#!/bin/sh\necho {{.Name}} {{.Group}} {{.Index}} {{.Subnet}} {{.Port}} > /etc/shoal-instance\n"}
	d := e.driver(t, cfg)
	d.port = 8080
	const owner = "owner-subnets"
	perSubnet := map[string]int{}
	for i := range 6 {
		name := fmt.Sprintf("web-%03d", i+1)
		req := request(owner, name)
		req.Index = i + 1
		s, err := d.Create(ctx, req)
		if err != nil {
			t.Fatalf("Create %s: %v", name, err)
		}
		got, err := d.client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{s.ID}})
		if err != nil {
			t.Fatal(err)
		}
		inst := got.Reservations[0].Instances[0]
		subnet := aws.ToString(inst.SubnetId)
		perSubnet[subnet]++
		if s.Zone != zoneOf[subnet] || s.Zone == "" {
			t.Errorf("%s in %s listed in zone %q, want %q", name, subnet, s.Zone, zoneOf[subnet])
		}
		attr, err := d.client.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: aws.String(s.ID), Attribute: types.InstanceAttributeNameUserData})
		if err != nil || attr.UserData == nil {
			t.Fatalf("DescribeInstanceAttribute userData: %v", err)
		}
		raw, err := base64.StdEncoding.DecodeString(aws.ToString(attr.UserData.Value))
		if want := fmt.Sprintf("#!/bin/sh\necho %s web %d %s 8080 > /etc/shoal-instance\n", name, i+1, subnet); err != nil || string(raw) != want {
			t.Errorf("user data of %s: %q (%v), want %q", name, raw, err, want)
		}
	}
	for _, s := range subnets {
		if perSubnet[s] != 2 {
			t.Errorf("subnets got %v, want 2 in each of %v", perSubnet, subnets)
			break
		}
	}
	// Another group's instances do not count: its first goes to the
	// first subnet.
	s, err := d.Create(ctx, request(owner, "api-001"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := d.client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{s.ID}})
	if sub := aws.ToString(got.Reservations[0].Instances[0].SubnetId); sub != subnets[0] {
		t.Errorf("another group's first instance in %s, want the first subnet %s", sub, subnets[0])
	}

	// Through the provider: its listing gives an instance's zone.
	p := runProvider(t, d, "owner-zone", t.TempDir())
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in, err := p.Start(sctx, spec("web-001", 1))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() { _ = p.Delete(context.Background(), in) }()
	if z := p.Zone(in.Record()); z != zoneOf[subnets[0]] {
		t.Errorf("provider's Zone(%s) = %q, want %q", in.Record().Name, z, zoneOf[subnets[0]])
	}
}

// TestSubnetPickCountsCreatesNotListedYet: a create that returned after the
// next pick's listing began is not in that listing; the pick still counts
// it (before, its count as under way ended when it returned, and two
// creates of a scale-out on a busy machine went into one subnet).
func TestSubnetPickCountsCreatesNotListedYet(t *testing.T) {
	e := newMotoEnv(t)
	ctx := t.Context()
	out, err := e.driver(t, Config{}).client.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []types.Filter{{Name: aws.String("default-for-az"), Values: []string{"true"}}}})
	if err != nil || len(out.Subnets) < 3 {
		t.Fatalf("DescribeSubnets: %v", err)
	}
	var subnets []string
	for _, s := range out.Subnets[:3] {
		subnets = append(subnets, aws.ToString(s.SubnetId))
	}
	d := e.driver(t, Config{AMI: e.ami, InstanceType: "t3.micro", Subnets: subnets})
	req := request("owner-race", "web-001")
	first, p, err := d.pickSubnet(ctx, req)
	if err != nil || first != subnets[0] {
		t.Fatalf("first pick %q, %v; want %s", first, err, subnets[0])
	}
	// Its create returned; the next listing does not show it yet.
	d.placed(req.Group, p, "i-00000000000000001", nil)
	second, p2, err := d.pickSubnet(ctx, request("owner-race", "web-002"))
	if err != nil || second != subnets[1] {
		t.Fatalf("second pick %q, %v; want %s (the first create, not listed yet, counted in %s)", second, err, subnets[1], first)
	}
	// A failed create counts no more.
	d.placed(req.Group, p2, "", fmt.Errorf("refused"))
	if third, _, err := d.pickSubnet(ctx, request("owner-race", "web-003")); err != nil || third != subnets[1] {
		t.Fatalf("pick after a failed create %q, %v; want %s again", third, err, subnets[1])
	}
}
