package ec2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmw "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/shoal-lb/shoal/internal/provider/cloud"
	"github.com/shoal-lb/shoal/internal/testmoto"
)

// The tests run the real SDK against moto on 127.0.0.1. Moto invents its
// instances' addresses; no test sends anything to them.

// calls counts API calls by operation and times them: moto's latency, and
// proof that a listing is paged, not one call per instance.
type calls struct {
	mu  sync.Mutex
	n   map[string]int
	dur map[string]time.Duration
}

// option adds the counting middleware to a client's stack, after the
// retry step, so that every attempt on the wire counts.
func (c *calls) option(o *ec2.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Finalize.Add(middleware.FinalizeMiddlewareFunc("shoal-count", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			start := time.Now()
			out, md, err := next.HandleFinalize(ctx, in)
			c.mu.Lock()
			op := awsmw.GetOperationName(ctx)
			c.n[op]++
			c.dur[op] += time.Since(start)
			c.mu.Unlock()
			return out, md, err
		}), middleware.After)
	})
}

func (c *calls) count(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[op]
}

// report logs the mean latency of each operation.
func (c *calls) report(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for _, op := range slices.Sorted(func(yield func(string) bool) {
		for k := range c.n {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%s %d× mean %v", op, c.n[op], (c.dur[op]/time.Duration(c.n[op])).Round(100*time.Microsecond)))
	}
	t.Logf("moto latency per call: %s", strings.Join(parts, "; "))
}

// motoEnv is moto with what instances are made from: an AMI of moto's, a
// default subnet, a security group and a launch template.
type motoEnv struct {
	endpoint string
	creds    string // a shared credentials file
	calls    *calls
	ami      string
	subnet   string
	sg       string
	lt       string // the launch template's name
}

const region = "us-east-1"

func newMotoEnv(t *testing.T) *motoEnv {
	srv := testmoto.Shared(t)
	e := &motoEnv{endpoint: srv.Endpoint, calls: &calls{n: map[string]int{}, dur: map[string]time.Duration{}}}
	e.creds = filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(e.creds, []byte("[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n\n[other]\naws_access_key_id = AKIAOTHER\naws_secret_access_key = other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := e.driver(t, Config{})
	ctx := t.Context()
	subnets, err := d.client.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{})
	if err != nil || len(subnets.Subnets) == 0 {
		t.Fatalf("DescribeSubnets: %v", err)
	}
	imgs, err := d.client.DescribeImages(ctx, &ec2.DescribeImagesInput{})
	if err != nil || len(imgs.Images) == 0 {
		t.Fatalf("DescribeImages: %v", err)
	}
	e.ami = aws.ToString(imgs.Images[0].ImageId)
	e.subnet = aws.ToString(subnets.Subnets[0].SubnetId)
	sg, err := d.client.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
		GroupName: aws.String("web"), Description: aws.String("shoal test"), VpcId: subnets.Subnets[0].VpcId,
	})
	if err != nil {
		t.Fatalf("CreateSecurityGroup: %v", err)
	}
	e.sg = aws.ToString(sg.GroupId)
	e.lt = "web-template"
	if _, err := d.client.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String(e.lt),
		LaunchTemplateData: &types.RequestLaunchTemplateData{ImageId: aws.String(e.ami), InstanceType: types.InstanceTypeT3Micro},
	}); err != nil {
		t.Fatalf("CreateLaunchTemplate: %v", err)
	}
	return e
}

// driver returns a driver of cfg with moto's endpoint, region and the
// credentials file filled in where cfg leaves them out.
func (e *motoEnv) driver(t *testing.T, cfg Config) *Driver {
	t.Helper()
	if cfg.Region == "" {
		cfg.Region = region
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = e.endpoint
	}
	if cfg.CredentialsFile == "" && os.Getenv(EnvAWSAccessKeyID) == "" {
		cfg.CredentialsFile, cfg.Profile = e.creds, "default"
	}
	if cfg.Market == "" {
		cfg.Market = OnDemand
	}
	d, err := newDriver(t.Context(), cfg, e.calls.option)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

func request(owner, name string) cloud.CreateRequest {
	group, _, _ := strings.Cut(name, "-")
	return cloud.CreateRequest{
		Name: name, Group: group, Index: 1,
		Tags: map[string]string{cloud.TagOwner: owner, cloud.TagGroup: group, cloud.TagInstance: name},
	}
}

// byID returns the listed server with id.
func byID(list []cloud.Server, id string) (cloud.Server, bool) {
	for _, s := range list {
		if s.ID == id {
			return s, true
		}
	}
	return cloud.Server{}, false
}

func TestMoto(t *testing.T) {
	e := newMotoEnv(t)
	t.Cleanup(func() { e.calls.report(t) })

	t.Run("LaunchTemplate", func(t *testing.T) {
		ctx := t.Context()
		d := e.driver(t, Config{
			LaunchTemplate: &LaunchTemplate{Name: e.lt, Version: "$Latest"},
			Tags:           map[string]string{"team": "web"},
		})
		const owner = "owner-lt"
		s, err := d.Create(ctx, request(owner, "web-001"))
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		if !strings.HasPrefix(s.ID, "i-") || s.Name != "web-001" || s.Tags[cloud.TagOwner] != owner || s.Tags["team"] != "web" {
			t.Errorf("created %+v", s)
		}
		if s.Phase != cloud.Pending && s.Phase != cloud.Running {
			t.Errorf("created in phase %s (%s), want pending or running", s.Phase, s.State)
		}
		// Another owner's instance, in the same account: never ours.
		other, err := d.Create(ctx, request("someone-else", "web-001"))
		if err != nil {
			t.Fatalf("Create other: %v", err)
		}

		var got cloud.Server
		deadline := time.Now().Add(10 * time.Second)
		for {
			list, err := d.List(ctx, owner)
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if len(list) != 1 || list[0].ID != s.ID {
				t.Fatalf("List(%s) = %+v, want exactly %s (not %s)", owner, list, s.ID, other.ID)
			}
			if got = list[0]; got.Phase == cloud.Running || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if got.Phase != cloud.Running || got.State != "running" || got.IP == "" || got.Created.IsZero() {
			t.Errorf("listed %+v, want running with an address and a launch time", got)
		}
		for k, v := range map[string]string{"Name": "web-001", cloud.TagOwner: owner, cloud.TagGroup: "web", cloud.TagInstance: "web-001", "team": "web"} {
			if got.Tags[k] != v {
				t.Errorf("tag %s = %q, want %q", k, got.Tags[k], v)
			}
		}
		// The template's instance type shows it was used.
		out, err := d.client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{s.ID}})
		if err != nil {
			t.Fatal(err)
		}
		if i := out.Reservations[0].Instances[0]; i.InstanceType != types.InstanceTypeT3Micro || aws.ToString(i.ImageId) != e.ami {
			t.Errorf("instance type %s, image %s; want the template's t3.micro, %s", i.InstanceType, aws.ToString(i.ImageId), e.ami)
		}

		if err := d.Delete(ctx, s.ID); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		list, err := d.List(ctx, owner)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if l, ok := byID(list, s.ID); ok && l.Phase != cloud.Gone {
			t.Errorf("after Delete listed %+v, want gone", l)
		}
		// Deleting again, or what EC2 never had, is not an error.
		if err := d.Delete(ctx, s.ID); err != nil {
			t.Errorf("Delete of a terminated instance: %v", err)
		}
		if err := d.Delete(ctx, "i-0123456789abcdef0"); err != nil {
			t.Errorf("Delete of an unknown instance: %v", err)
		}
		// The other owner's instance is untouched.
		olist, err := d.List(ctx, "someone-else")
		if err != nil || len(olist) != 1 || olist[0].Phase == cloud.Gone {
			t.Errorf("List(someone-else) = %+v, %v; want its instance alive", olist, err)
		}
	})

	t.Run("AMISpot", func(t *testing.T) {
		ctx := t.Context()
		d := e.driver(t, Config{
			AMI: e.ami, InstanceType: "t3.small", Subnet: e.subnet, SecurityGroups: []string{e.sg},
			Market: Spot, SpotMaxPrice: "0.05", Address: AddressPrivate,
		})
		s, err := d.Create(ctx, request("owner-spot", "api-001"))
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		out, err := d.client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{s.ID}})
		if err != nil {
			t.Fatal(err)
		}
		i := out.Reservations[0].Instances[0]
		if i.InstanceLifecycle != types.InstanceLifecycleTypeSpot {
			t.Errorf("lifecycle %q, want spot", i.InstanceLifecycle)
		}
		if i.InstanceType != types.InstanceTypeT3Small || aws.ToString(i.SubnetId) != e.subnet || len(i.SecurityGroups) != 1 || aws.ToString(i.SecurityGroups[0].GroupId) != e.sg {
			t.Errorf("instance %s in %s with %v; want t3.small in %s with %s", i.InstanceType, aws.ToString(i.SubnetId), i.SecurityGroups, e.subnet, e.sg)
		}
		if s.IP != aws.ToString(i.PrivateIpAddress) || s.IP == "" {
			t.Errorf("address %q, want the private address %q", s.IP, aws.ToString(i.PrivateIpAddress))
		}
	})

	// A group's plan picks the instance type by instance_types, over the
	// launch template's; a plan not listed, or none, keeps the template's.
	t.Run("PlanInstanceTypes", func(t *testing.T) {
		ctx := t.Context()
		d := e.driver(t, Config{
			LaunchTemplate: &LaunchTemplate{Name: e.lt, Version: "$Latest"},
			InstanceTypes:  map[string][]string{"medium": {"t3.small"}, "largest": {"c5.xlarge"}},
		})
		for i, tt := range []struct {
			plan string
			want types.InstanceType
		}{{"medium", types.InstanceTypeT3Small}, {"largest", types.InstanceTypeC5Xlarge}, {"smallest", types.InstanceTypeT3Micro}, {"", types.InstanceTypeT3Micro}} {
			req := request("owner-plans", fmt.Sprintf("web-%03d", i+1))
			req.Plan = tt.plan
			s, err := d.Create(ctx, req)
			if err != nil {
				t.Fatalf("Create with plan %q: %v", tt.plan, err)
			}
			out, err := d.client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{s.ID}})
			if err != nil {
				t.Fatal(err)
			}
			if got := out.Reservations[0].Instances[0].InstanceType; got != tt.want {
				t.Errorf("plan %q: instance type %s, want %s", tt.plan, got, tt.want)
			}
		}
	})

	t.Run("Pagination", func(t *testing.T) {
		ctx := t.Context()
		d := e.driver(t, Config{AMI: e.ami, InstanceType: "t3.micro"})
		d.pageSize = 5
		const owner, n = "owner-pages", 12
		want := map[string]bool{}
		for i := range n {
			s, err := d.Create(ctx, request(owner, fmt.Sprintf("web-%03d", i+1)))
			if err != nil {
				t.Fatalf("Create %d: %v", i, err)
			}
			want[s.ID] = true
		}
		before := e.calls.count("DescribeInstances")
		list, err := d.List(ctx, owner)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		pages := e.calls.count("DescribeInstances") - before
		got := map[string]bool{}
		for _, s := range list {
			got[s.ID] = true
		}
		if len(list) != n || len(got) != n {
			t.Fatalf("listed %d (%d distinct), want %d", len(list), len(got), n)
		}
		for id := range want {
			if !got[id] {
				t.Errorf("%s not listed", id)
			}
		}
		if pages != 3 {
			t.Errorf("%d DescribeInstances calls for %d instances in pages of 5, want 3", pages, n)
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		ctx := t.Context()
		tests := []struct {
			name string
			cfg  Config
			want string
		}{
			{"unknown AMI", Config{AMI: "ami-0000000000000000f", InstanceType: "t3.micro"}, "check ami"},
			{"unknown subnet", Config{AMI: e.ami, InstanceType: "t3.micro", Subnet: "subnet-00000000000000000"}, "check subnet"},
			{"unknown launch template", Config{LaunchTemplate: &LaunchTemplate{Name: "nothing", Version: "$Default"}}, "InvalidLaunchTemplate"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := e.driver(t, tt.cfg).Create(ctx, request("owner-bad", "web-001"))
				if err == nil {
					t.Fatal("Create succeeded")
				}
				if errors.Is(err, cloud.ErrRetryable) || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "ec2 RunInstances: ") {
					t.Errorf("Create: %v; want a non-retryable error with %q", err, tt.want)
				}
				t.Logf("%s: %v", tt.name, err)
			})
		}
	})

	t.Run("CredentialsEnv", func(t *testing.T) {
		t.Setenv(EnvAWSAccessKeyID, "testing")
		t.Setenv(EnvAWSSecretAccessKey, "testing")
		d := e.driver(t, Config{AMI: e.ami, InstanceType: "t3.micro"})
		if c, err := d.client.Options().Credentials.Retrieve(t.Context()); err != nil || c.Source != "environment" {
			t.Errorf("credentials from %q, %v; want the environment", c.Source, err)
		}
		if _, err := d.List(t.Context(), "owner-env"); err != nil {
			t.Errorf("List with keys from the environment: %v", err)
		}
		t.Setenv(EnvAWSSecretAccessKey, "")
		_, err := newDriver(t.Context(), Config{Region: region})
		if err == nil || !strings.Contains(err.Error(), EnvAWSSecretAccessKey) {
			t.Errorf("New without a secret in the environment: %v", err)
		}
	})

	t.Run("CredentialsProfile", func(t *testing.T) {
		d := e.driver(t, Config{CredentialsFile: e.creds, Profile: "other"})
		c, err := d.client.Options().Credentials.Retrieve(t.Context())
		if err != nil || c.AccessKeyID != "AKIAOTHER" {
			t.Errorf("credentials of profile other: %q, %v", c.AccessKeyID, err)
		}
		_, err = newDriver(t.Context(), Config{Region: region, CredentialsFile: e.creds, Profile: "missing"})
		if err == nil || strings.Contains(err.Error(), "testing") {
			t.Errorf("New with a missing profile: %v", err)
		}
	})
}

// TestUnreachable proves that an endpoint that refuses or never answers
// fails a call promptly: retryable when refused, the caller's deadline
// when it hangs. Both listen on 127.0.0.1 only.
func TestUnreachable(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(creds, []byte("[default]\naws_access_key_id = k\naws_secret_access_key = s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()

	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()

	newAt := func(addr string) *Driver {
		d, err := newDriver(t.Context(), Config{Region: region, CredentialsFile: creds, Profile: "default", Endpoint: "http://" + addr})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	_, err = newAt(closed).List(t.Context(), "o")
	if !errors.Is(err, cloud.ErrRetryable) || !strings.Contains(err.Error(), "cannot reach the EC2 API") {
		t.Errorf("List on a closed port: %v; want a retryable error", err)
	}
	t.Logf("closed port: %v", err)

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = newAt(hang.Addr().String()).Create(ctx, request("o", "web-001"))
	if err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("Create on a hung endpoint: %v after %v; want the caller's deadline", err, time.Since(start))
	}
	if errors.Is(err, cloud.ErrRetryable) {
		t.Errorf("Create on a hung endpoint whose caller gave up: %v; the caller's deadline is not the API's failure", err)
	}
	t.Logf("hung endpoint: %v", err)

	// With time left to the caller, the driver's own bound ends the call:
	// the API failed to answer, worth retrying.
	d := newAt(hang.Addr().String())
	d.callTimeout = 300 * time.Millisecond
	start = time.Now()
	_, err = d.List(t.Context(), "o")
	if !errors.Is(err, cloud.ErrRetryable) || !strings.Contains(err.Error(), "no answer within 300ms") || time.Since(start) > 5*time.Second {
		t.Errorf("List on a hung endpoint: %v after %v; want a retryable timeout after 300ms", err, time.Since(start))
	}
	t.Logf("hung endpoint, the driver's bound: %v", err)
}
