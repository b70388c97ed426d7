package e2e

import (
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// subnetsOf returns the subnet of each of moto's live shoal instances, by
// their shoal-instance tag.
func (c *motoCloud) subnetsOf() map[string]string {
	c.t.Helper()
	out := map[string]string{}
	res, err := c.client.DescribeInstances(c.t.Context(), &ec2.DescribeInstancesInput{
		Filters: []types.Filter{{Name: aws.String("tag-key"), Values: []string{"shoal-owner"}}, {Name: aws.String("instance-state-name"), Values: []string{"pending", "running"}}},
	})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, r := range res.Reservations {
		for _, i := range r.Instances {
			for _, tag := range i.Tags {
				if aws.ToString(tag.Key) == "shoal-instance" {
					out[aws.ToString(tag.Value)] = aws.ToString(i.SubnetId)
				}
			}
		}
	}
	return out
}

// TestEC2MotoSubnetsSpread: the real shoal on an ec2 provider with three
// subnets (moto's default VPC has one per availability zone) spreads the
// group across them (3 → one in each), a scale-in takes from the fullest
// (4 → 3: one in each again), and each instance's user data, read back
// from moto, is user_data rendered with its own name and subnet.
func TestEC2MotoSubnetsSpread(t *testing.T) {
	parallel(t) // waits on polls and moto
	c := newMotoCloud(t)
	out, err := c.client.DescribeSubnets(t.Context(), &ec2.DescribeSubnetsInput{Filters: []types.Filter{{Name: aws.String("default-for-az"), Values: []string{"true"}}}})
	if err != nil || len(out.Subnets) < 3 {
		t.Fatalf("DescribeSubnets: %v", err)
	}
	var subnets []string
	for _, s := range out.Subnets[:3] {
		subnets = append(subnets, aws.ToString(s.SubnetId))
	}
	prov := c.provider() + fmt.Sprintf("    subnets: [%s]\n    user_data: \"#!/bin/sh\\necho {{.Name}} {{.Subnet}}\\n\"\n", strings.Join(subnets, ", "))
	g := web
	g.Extra, g.Cloud = "    provider: aws\n", true
	e := newEnv(t, prov, g)
	e.start()
	e.waitInService("web", 2)

	count := func() map[string]int {
		n := map[string]int{}
		for _, s := range c.subnetsOf() {
			n[s]++
		}
		return n
	}
	scaleSync(t, e, "--size", "3")
	e.eventually("one instance in each subnet", 10*time.Second, func() error {
		if n := count(); len(n) != 3 || n[subnets[0]] != 1 || n[subnets[1]] != 1 || n[subnets[2]] != 1 {
			return fmt.Errorf("instances per subnet %v, want 1 in each of %v", n, subnets)
		}
		return nil
	})
	scaleSync(t, e, "--size", "4")
	var fullest string
	e.eventually("4 instances", 10*time.Second, func() error {
		n := count()
		for s, k := range n {
			if k == 2 {
				fullest = s
			}
		}
		if len(c.subnetsOf()) != 4 || fullest == "" {
			return fmt.Errorf("instances per subnet %v", n)
		}
		return nil
	})
	scaleSync(t, e, "--size", "3")
	e.eventually("the scale-in took from the fullest subnet, "+fullest, 20*time.Second, func() error {
		if n := count(); len(n) != 3 || n[subnets[0]] != 1 || n[subnets[1]] != 1 || n[subnets[2]] != 1 {
			return fmt.Errorf("instances per subnet %v, want 1 in each", n)
		}
		return nil
	})
	e.checkInSync("web")

	live, err := c.live()
	if err != nil {
		t.Fatal(err)
	}
	sub := c.subnetsOf()
	for _, name := range slices.Sorted(maps.Keys(live)) {
		attr, err := c.client.DescribeInstanceAttribute(t.Context(), &ec2.DescribeInstanceAttributeInput{InstanceId: aws.String(live[name]), Attribute: types.InstanceAttributeNameUserData})
		if err != nil || attr.UserData == nil {
			t.Fatalf("user data of %s: %v", name, err)
		}
		raw, err := base64.StdEncoding.DecodeString(aws.ToString(attr.UserData.Value))
		if want := "#!/bin/sh\necho " + name + " " + sub[name] + "\n"; err != nil || string(raw) != want {
			t.Errorf("user data of %s = %q, %v; want %q", name, raw, err, want)
		}
	}
}
