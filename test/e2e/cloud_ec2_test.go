package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/shoal-lb/shoal/internal/testmoto"
)

// These run the real shoal binary on an ec2 provider against moto, an
// emulator of the EC2 API on 127.0.0.1. Moto invents its instances'
// addresses: stand-ins serve for them on 127.0.0.1, and nothing is ever
// sent to moto's addresses.

// motoCloud is moto with a launch template, seen through the SDK as the
// test's own client (not shoal's).
type motoCloud struct {
	t        *testing.T
	endpoint string
	creds    string
	// secret is the secret key in creds, unique to the test: shoal must
	// never show it (moto accepts any).
	secret string
	client *ec2.Client
}

func newMotoCloud(t *testing.T) *motoCloud {
	t.Helper()
	srv := testmoto.ForTest(t)
	c := &motoCloud{t: t, endpoint: srv.Endpoint, creds: filepath.Join(t.TempDir(), "credentials"), secret: "e2e-secret-" + rand.Text()}
	if err := os.WriteFile(c.creds, []byte("[shoal]\naws_access_key_id = testing\naws_secret_access_key = "+c.secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.client = ec2.NewFromConfig(aws.Config{
		Region: "us-east-1",
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "testing", SecretAccessKey: "testing"}, nil
		}),
		BaseEndpoint: aws.String(srv.Endpoint),
	})
	ctx := t.Context()
	imgs, err := c.client.DescribeImages(ctx, &ec2.DescribeImagesInput{})
	if err != nil || len(imgs.Images) == 0 {
		t.Fatalf("DescribeImages: %v", err)
	}
	if _, err := c.client.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String("web"),
		LaunchTemplateData: &types.RequestLaunchTemplateData{ImageId: imgs.Images[0].ImageId, InstanceType: types.InstanceTypeT3Micro},
	}); err != nil {
		t.Fatalf("CreateLaunchTemplate: %v", err)
	}
	return c
}

func (c *motoCloud) provider() string {
	return c.providerWith(fmt.Sprintf(`[%q, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"]`, filepath.Join(binDir, "demo-backend")))
}

// providerWith is the providers entry with standIn as its emulator's
// stand-in argv.
func (c *motoCloud) providerWith(standIn string) string {
	return fmt.Sprintf(`providers:
  - name: aws
    type: ec2
    port: 8080
    interval: 500ms
    boot_timeout: 30s
    region: us-east-1
    endpoint: %s
    credentials_file: %s
    profile: shoal
    launch_template: {name: web, version: "$Latest"}
    market: spot
    emulator: {stand_in: %s}
`, c.endpoint, c.creds, standIn)
}

// live returns the instances moto has that are not terminated, by their
// shoal-instance tag; a name twice is an error.
func (c *motoCloud) live() (map[string]string, error) {
	live, _, err := c.instances()
	return live, err
}

// instances returns the instances moto has that are not terminated, by
// their shoal-instance tag, and how many ever were (terminated ones
// included).
func (c *motoCloud) instances() (live map[string]string, total int, err error) {
	out := map[string]string{}
	pages := ec2.NewDescribeInstancesPaginator(c.client, &ec2.DescribeInstancesInput{
		Filters: []types.Filter{{Name: aws.String("tag-key"), Values: []string{"shoal-owner"}}},
	})
	for pages.HasMorePages() {
		page, err := pages.NextPage(c.t.Context())
		if err != nil {
			return nil, 0, err
		}
		for _, r := range page.Reservations {
			for _, i := range r.Instances {
				total++
				if i.State.Name == types.InstanceStateNameTerminated {
					continue
				}
				name := ""
				for _, tag := range i.Tags {
					if aws.ToString(tag.Key) == "shoal-instance" {
						name = aws.ToString(tag.Value)
					}
				}
				if prev, dup := out[name]; dup {
					return nil, 0, fmt.Errorf("two instances for %q: %s and %s", name, prev, aws.ToString(i.InstanceId))
				}
				out[name] = aws.ToString(i.InstanceId)
			}
		}
	}
	return out, total, nil
}

// matches fails unless moto's live instances are exactly the group's:
// no duplicate, no orphan.
func (c *motoCloud) matches(e *shoalEnv) error {
	live, err := c.live()
	if err != nil {
		return err
	}
	var names []string
	for _, in := range e.status().Groups[0].Instances {
		names = append(names, in.Name)
		if _, ok := live[in.Name]; !ok {
			return fmt.Errorf("instance %s has no EC2 instance (moto has %v)", in.Name, live)
		}
	}
	if len(live) != len(names) {
		return fmt.Errorf("moto has %v for instances %v", live, names)
	}
	return nil
}

// secretHidden fails the test if the credentials' secret key appears in
// shoal's log, `shoal events`, `shoal status` or `shoal jobs` (JSON).
func (c *motoCloud) secretHidden(e *shoalEnv) {
	c.t.Helper()
	where := map[string]string{"shoal's log": e.log.String()}
	for _, args := range [][]string{{"events", "--since", "1h", "-o", "json"}, {"status", "-o", "json"}, {"jobs", "-o", "json"}} {
		out, stderr, code := e.cli(args...)
		if code != 0 || out == "" {
			c.t.Fatalf("shoal %s: exit %d, %q%s", strings.Join(args, " "), code, out, stderr)
		}
		where["shoal "+strings.Join(args, " ")] = out + stderr
	}
	for what, text := range where {
		if strings.Contains(text, c.secret) {
			c.t.Errorf("the credentials' secret key appears in %s", what)
		}
	}
}

// TestEC2MotoScaleKillRestart: the real shoal on EC2 (moto, spot
// instances from a launch template): 2 → 5 → 2 under keep-alive load with
// no failed request, traffic only to stand-ins on 127.0.0.1; kill -9 in
// the middle of a scale-out and restart: no duplicate instance, no
// orphan; SIGINT terminates every instance. The credentials' secret key
// appears nowhere shoal writes or answers.
func TestEC2MotoScaleKillRestart(t *testing.T) {
	parallel(t) // mostly waits on polls, boots and timeouts: see the package doc
	c := newMotoCloud(t)
	g := web
	g.Extra, g.Cloud = "    provider: aws\n", true
	e := newEnv(t, c.provider(), g)
	e.start()
	e.waitInService("web", 2)
	e.eventually("moto's instances are the group's", 10*time.Second, func() error { return c.matches(e) })
	for _, in := range e.status().Groups[0].Instances {
		if !strings.HasPrefix(in.Addr, "127.0.0.1:") {
			t.Fatalf("instance %s at %s: traffic must go to its stand-in, never to moto's address", in.Name, in.Addr)
		}
	}

	stop := load(t, e)
	for _, size := range []string{"5", "2"} {
		begin := time.Now()
		scaleSync(t, e, "--size", size)
		t.Logf("scaled to %s in %s", size, time.Since(begin).Round(time.Millisecond))
		e.checkInSync("web")
		if err := c.matches(e); err != nil {
			t.Fatalf("after scaling to %s: %v", size, err)
		}
	}
	res := stop()
	if res.Failures > 0 || res.Requests == 0 {
		t.Fatalf("%d of %d GETs failed while scaling: %v", res.Failures, res.Requests, res.FailureSamples)
	}

	if out, stderr, code := e.cli("scale", "web", "--size", "5"); code != 0 {
		t.Fatalf("scale: %s%s", out, stderr)
	}
	e.eventually("a third instance launched", 10*time.Second, func() error {
		live, err := c.live()
		if err == nil && len(live) < 3 {
			err = fmt.Errorf("%d instances", len(live))
		}
		return err
	})
	c.secretHidden(e)
	e.kill9()
	live, _ := c.live()
	t.Logf("killed with %d live instances in moto", len(live))
	e.start()
	e.waitInService("web", 5)
	e.eventually("no duplicate, no orphan", 15*time.Second, func() error { return c.matches(e) })
	e.checkInSync("web")
	t.Logf("after the kill -9: %d strays terminated", strings.Count(e.log.String(), "stray instance stopped"))
	c.secretHidden(e)

	e.stop()
	if live, err := c.live(); err != nil || len(live) > 0 {
		t.Fatalf("instances left running after shoal stopped: %v %v", live, err)
	}
	if strings.Contains(e.log.String(), c.secret) {
		t.Errorf("the credentials' secret key appears in shoal's log")
	}
}

// TestEC2MotoUnreachableTerminated: an instance that never passes its
// health check (its stand-in serves nothing) is terminated after the
// health grace and replaced: no leaked spend, never more than one live
// instance for the group's one.
func TestEC2MotoUnreachableTerminated(t *testing.T) {
	parallel(t) // mostly waits on polls, boots and timeouts: see the package doc
	c := newMotoCloud(t)
	g := groupSpec{Name: "web", Min: 1, Max: 1, Extra: "    provider: aws\n", Cloud: true,
		Health: "{path: /healthz, interval: 300ms, rise: 2, fall: 2, timeout: 1s, grace: 2s}"}
	e := newEnv(t, c.providerWith(`["/bin/sleep", "600"]`), g)
	e.start()
	e.eventually("the unreachable instance terminated and replaced", 60*time.Second, func() error {
		live, total, err := c.instances()
		switch {
		case err != nil:
			return err
		case len(live) > 1:
			t.Fatalf("%d live instances for a group of 1: %v", len(live), live)
		case total < 2 || total-len(live) < 1:
			return fmt.Errorf("%d instances launched, %d live", total, len(live))
		}
		return nil
	})
	if !strings.Contains(e.log.String(), "health check did not pass within 2s") {
		t.Errorf("shoal's log does not give the reason:\n%s", e.log)
	}
	e.stop()
	if live, err := c.live(); err != nil || len(live) > 0 {
		t.Fatalf("instances left running after shoal stopped: %v %v", live, err)
	}
}

// TestEC2MotoRegionItLacks: a region EC2 does not have (ap-northeast-9,
// right in form, so `shoal validate` accepts it: the SDK publishes no list
// of regions) fails each start at once with the region named, instead of
// an outage ("HTTP status 500 (temporary)") retried until create_timeout;
// status shows it, and the group backs off between starts.
func TestEC2MotoRegionItLacks(t *testing.T) {
	parallel(t)
	c := newMotoCloud(t)
	prov := strings.Replace(c.provider(), "region: us-east-1", "region: ap-northeast-9", 1)
	prov = strings.Replace(prov, "    interval: 500ms\n", "    interval: 500ms\n    create_timeout: 5m\n", 1)
	e := newEnv(t, prov, groupSpec{Name: "web", Min: 1, Max: 2, Extra: "    provider: aws\n", Cloud: true})
	e.start()
	const want = "ec2: region ap-northeast-9: the EC2 API does not answer for it (HTTP status 500): check region"
	start := time.Now()
	var reasons []string
	e.eventually("the region's failure in status", 60*time.Second, func() error {
		reasons = nil
		for _, f := range e.status().Groups[0].LastFailures {
			reasons = append(reasons, f.Reason)
			if strings.Contains(f.Reason, want) {
				return nil
			}
		}
		return fmt.Errorf("recent failures %q", reasons)
	})
	t.Logf("failed after %v: %q", time.Since(start).Round(time.Millisecond), reasons)
	for _, r := range reasons {
		if strings.Contains(r, "temporary") {
			t.Errorf("failure %q: an unknown region is not an outage", r)
		}
	}
}
