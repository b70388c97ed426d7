// Package ec2 is the cloud.Driver of Amazon EC2: an instance is an EC2
// instance made from a launch template, or from an AMI and an instance
// type, tagged with shoal's markers when it is launched; the provider's
// listing is one paged DescribeInstances filtered by the owner tag, and
// deletion is TerminateInstances.
//
// It is tested against moto, an emulator of the EC2 API, not a real
// account.
package ec2

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/shoal-lb/shoal/internal/provider/cloud"
	"github.com/shoal-lb/shoal/internal/template"
)

// defaultCallTimeout bounds one API call (one page of a listing) when the
// caller's context allows longer: an endpoint that accepts the connection
// and never answers must not hold a reconciler.
const defaultCallTimeout = 30 * time.Second

// pageSize is how many instances one DescribeInstances page holds, the
// API's most.
const pageSize = 1000

// Driver is the EC2 driver of one provider entry.
type Driver struct {
	client *ec2.Client
	cfg    Config
	// pageSize and callTimeout are fields so that tests can make listings
	// span pages and calls time out soon.
	pageSize    int32
	callTimeout time.Duration

	// regionOK: DescribeRegions listed the region, enabled; checked before
	// the first create and when a listing fails until then.
	mu       sync.Mutex
	regionOK bool
	// placing holds, by group, the creates under way and those a listing
	// may not show yet, which the next pick of a subnet counts too.
	placing map[string][]*placement

	// userData is user_data compiled; port is what {{.Port}} gives.
	userData template.Argv
	port     int
}

var (
	_ cloud.Driver      = (*Driver)(nil)
	_ cloud.PowerDriver = (*Driver)(nil)
)

// New returns the driver of cfg, whose servers serve on port. It calls no
// API: bad credentials show at the first call.
func New(ctx context.Context, cfg Config, port int) (cloud.Driver, error) {
	d, err := newDriver(ctx, cfg)
	if err != nil {
		return nil, err
	}
	d.port = port
	return d, nil
}

// newDriver is New with options for the EC2 client (tests count calls).
func newDriver(ctx context.Context, cfg Config, opts ...func(*ec2.Options)) (*Driver, error) {
	if cfg.Region == "" {
		return nil, errors.New("ec2: region is required")
	}
	creds, err := credentials(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// The aws.Config is built here, not by config.LoadDefaultConfig, so
	// that nothing the config does not name (AWS_ENDPOINT_URL, retry
	// settings in ~/.aws/config) changes where shoal sends requests, and
	// only credentials: default lets the SDK's chain choose whose keys it
	// signs them with.
	ac := aws.Config{
		Region:      cfg.Region,
		Credentials: aws.NewCredentialsCache(creds),
		// The provider retries with back-off (cloud.ErrRetryable): the
		// SDK's own retries would multiply its attempts and hide throttling.
		Retryer: func() aws.Retryer { return aws.NopRetryer{} },
	}
	if cfg.Endpoint != "" {
		ac.BaseEndpoint = aws.String(cfg.Endpoint)
	}
	d := &Driver{client: ec2.NewFromConfig(ac, opts...), cfg: cfg, pageSize: pageSize, callTimeout: defaultCallTimeout, placing: map[string][]*placement{}}
	if cfg.UserData != "" {
		if d.userData, err = CompileUserData(cfg.UserData); err != nil {
			return nil, fmt.Errorf("ec2: user_data: %w", err)
		}
	}
	return d, nil
}

// credentialsRefresh is how long keys read from a file are used before the
// file is read again, so that rotated keys are picked up without a restart.
const credentialsRefresh = 5 * time.Minute

// credentials returns the provider of the keys cfg names, checking now
// that they are there (the default chain is asked at the first call: an
// instance role is not there before the instance serves IMDS). Errors name
// the file, variable or role, never a key.
func credentials(ctx context.Context, cfg Config) (aws.CredentialsProvider, error) {
	base, err := baseCredentials(ctx, cfg)
	if err != nil || cfg.RoleARN == "" {
		return base, err
	}
	// The role's keys are asked of STS with the base keys; an emulator's
	// endpoint serves STS too.
	sc := aws.Config{Region: cfg.Region, Credentials: aws.NewCredentialsCache(base), Retryer: func() aws.Retryer { return aws.NopRetryer{} }}
	if cfg.Endpoint != "" {
		sc.BaseEndpoint = aws.String(cfg.Endpoint)
	}
	return stscreds.NewAssumeRoleProvider(sts.NewFromConfig(sc), cfg.RoleARN, func(o *stscreds.AssumeRoleOptions) {
		o.RoleSessionName = cfg.RoleSessionName
	}), nil
}

// baseCredentials are the keys of cfg's credentials setting.
func baseCredentials(ctx context.Context, cfg Config) (aws.CredentialsProvider, error) {
	switch cfg.Credentials {
	case CredsDefault:
		var opts []func(*awsconfig.LoadOptions) error
		if cfg.Profile != "" && cfg.Profile != Defaults.Profile {
			opts = append(opts, awsconfig.WithSharedConfigProfile(cfg.Profile))
		}
		// Only the chain's credentials are taken: nothing else it reads
		// (AWS_ENDPOINT_URL, retry settings) changes where shoal sends
		// requests.
		lc, err := awsconfig.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("ec2: credentials: default (profile %s): %w", cfg.Profile, err)
		}
		if lc.Credentials == nil {
			return nil, errors.New("ec2: credentials: default: the SDK's chain found no source of credentials")
		}
		return lc.Credentials, nil
	case CredsFile, "":
		if cfg.CredentialsFile != "" {
			return fileCredentials(ctx, cfg)
		}
	}
	v := aws.Credentials{
		AccessKeyID:     os.Getenv(EnvAWSAccessKeyID),
		SecretAccessKey: os.Getenv(EnvAWSSecretAccessKey),
		SessionToken:    os.Getenv(EnvAWSSessionToken),
		Source:          "environment",
	}
	if !v.HasKeys() {
		return nil, fmt.Errorf("ec2: without a credentials_file, %s and %s must both be set", EnvAWSAccessKeyID, EnvAWSSecretAccessKey)
	}
	return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return v, nil }), nil
}

// fileCredentials are the keys of cfg's credentials file, read again every
// credentialsRefresh.
func fileCredentials(ctx context.Context, cfg Config) (aws.CredentialsProvider, error) {
	file := aws.CredentialsProviderFunc(func(ctx context.Context) (aws.Credentials, error) {
		sc, err := LoadAWSProfile(ctx, cfg.CredentialsFile, cfg.Profile)
		if err != nil {
			return aws.Credentials{}, fmt.Errorf("ec2: credentials_file %s, profile %s: %w", cfg.CredentialsFile, cfg.Profile, err)
		}
		if !sc.Credentials.HasKeys() {
			return aws.Credentials{}, fmt.Errorf("ec2: credentials_file %s, profile %s: no aws_access_key_id and aws_secret_access_key", cfg.CredentialsFile, cfg.Profile)
		}
		v := sc.Credentials
		v.Source = "credentials_file"
		v.CanExpire, v.Expires = true, time.Now().Add(credentialsRefresh)
		return v, nil
	})
	if _, err := file.Retrieve(ctx); err != nil {
		return nil, err
	}
	return file, nil
}

// call bounds one API call by the driver's call timeout.
func (d *Driver) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.callTimeout)
}

// Create launches one instance carrying req.Tags and a Name tag of
// req.Name, and returns it as RunInstances does (pending, usually without
// an address yet).
func (d *Driver) Create(ctx context.Context, req cloud.CreateRequest) (cloud.Server, error) {
	if err := d.checkRegion(ctx); err != nil {
		return cloud.Server{}, err
	}
	if req.Attempt > 1 && req.Token != "" {
		// EC2 itself answers a repeated ClientToken with the instance it
		// made; this lookup makes sure of it where the API does not
		// (emulators), at one call per retry only.
		if s, ok, err := d.byToken(ctx, req); err != nil || ok {
			return s, err
		}
	}
	subnet := d.cfg.Subnet
	if len(d.cfg.Subnets) > 0 {
		var p *placement
		var err error
		if subnet, p, err = d.pickSubnet(ctx, req); err != nil {
			return cloud.Server{}, err
		}
		s, err := d.create(ctx, req, subnet)
		d.placed(req.Group, p, s.ID, err)
		return s, err
	}
	return d.create(ctx, req, subnet)
}

// create is Create in subnet ("": the launch template's).
func (d *Driver) create(ctx context.Context, req cloud.CreateRequest, subnet string) (cloud.Server, error) {
	spot := d.cfg.Market == Spot
	if spot && d.cfg.Spot.OnDemandBase > 0 {
		onDemand, err := d.liveOnDemand(ctx, req)
		if err != nil {
			return cloud.Server{}, err
		}
		spot = onDemand >= d.cfg.Spot.OnDemandBase
	}
	choices := d.cfg.InstanceTypesFor(req.Plan)
	if len(choices) == 0 {
		choices = []string{""} // the launch template's
	}
	var err error
	for i, t := range choices {
		var s cloud.Server
		s, err = d.run(ctx, req, subnet, t, i, spot)
		if err != nil && spot && d.cfg.Spot.Fallback && spotRefused(err) {
			// Spot refused: this type on-demand, its own token again.
			s, err = d.run(ctx, req, subnet, t, i+len(choices), false)
		}
		if err == nil || !noCapacity(err) {
			return s, err
		}
		// No capacity for this type here now: the next in the plan's
		// list, at once; the last one's refusal is retried with back-off.
	}
	if len(choices) > 1 {
		err = fmt.Errorf("%w (no capacity for any of %s)", err, strings.Join(choices, ", "))
	}
	return cloud.Server{}, err
}

// run is one RunInstances of req with instance type t ("": the launch
// template's), the plan's i-th choice.
func (d *Driver) run(ctx context.Context, req cloud.CreateRequest, subnet, t string, i int, spot bool) (cloud.Server, error) {
	in, err := d.runInput(req, subnet)
	if err != nil {
		return cloud.Server{}, err
	}
	if !spot {
		in.InstanceMarketOptions = nil
	}
	in.InstanceType = types.InstanceType(t)
	if i > 0 && in.ClientToken != nil {
		// Another type is another request to EC2: a token of its own,
		// derived, so that its retries stay idempotent too.
		in.ClientToken = aws.String(fmt.Sprintf("%s-%d", req.Token, i))
	}
	cctx, cancel := d.call(ctx)
	defer cancel()
	out, err := d.client.RunInstances(cctx, in)
	if err != nil {
		return cloud.Server{}, d.apiErr(ctx, "RunInstances", err)
	}
	if len(out.Instances) != 1 {
		return cloud.Server{}, fmt.Errorf("ec2 RunInstances: asked for 1 instance, got %d", len(out.Instances))
	}
	return d.server(out.Instances[0]), nil
}

// liveOnDemand counts req's group's live (pending, running) on-demand
// instances, for the spot market's on_demand_base.
func (d *Driver) liveOnDemand(ctx context.Context, req cloud.CreateRequest) (int, error) {
	cctx, cancel := d.call(ctx)
	defer cancel()
	n := 0
	pages := ec2.NewDescribeInstancesPaginator(d.client, &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: aws.String("tag:" + cloud.TagOwner), Values: []string{req.Tags[cloud.TagOwner]}},
		{Name: aws.String("tag:" + cloud.TagGroup), Values: []string{req.Group}},
		{Name: aws.String("instance-state-name"), Values: []string{"pending", "running"}},
	}, MaxResults: aws.Int32(d.pageSize)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(cctx)
		if err != nil {
			return 0, d.apiErr(ctx, "DescribeInstances", err)
		}
		for _, r := range page.Reservations {
			for _, i := range r.Instances {
				if i.InstanceLifecycle != types.InstanceLifecycleTypeSpot {
					n++
				}
			}
		}
	}
	return n, nil
}

// placement is a create of a group's instance in a subnet: under way
// (id ""), or made at done, which a listing started before may not show.
type placement struct {
	subnet string
	id     string
	done   time.Time
}

// placingFor is how long a create counts after it returned, unless a
// listing shows it: EC2's listings are eventually consistent.
const placingFor = time.Minute

// pickSubnet returns the subnet of subnets with the fewest of req's group's
// live instances (listed, plus the creates a listing may not show: under
// way, or made since it began), the first listed among equals, and the
// placement it counts now, which placed ends. (A create that ended while
// the next pick listed was counted by neither: two went into one subnet.)
func (d *Driver) pickSubnet(ctx context.Context, req cloud.CreateRequest) (string, *placement, error) {
	cctx, cancel := d.call(ctx)
	defer cancel()
	count := map[string]int{}
	listed := map[string]bool{}
	pages := ec2.NewDescribeInstancesPaginator(d.client, &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: aws.String("tag:" + cloud.TagOwner), Values: []string{req.Tags[cloud.TagOwner]}},
		{Name: aws.String("tag:" + cloud.TagGroup), Values: []string{req.Group}},
		{Name: aws.String("instance-state-name"), Values: []string{"pending", "running"}},
	}, MaxResults: aws.Int32(d.pageSize)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(cctx)
		if err != nil {
			return "", nil, d.apiErr(ctx, "DescribeInstances", err)
		}
		for _, r := range page.Reservations {
			for _, i := range r.Instances {
				count[aws.ToString(i.SubnetId)]++
				listed[aws.ToString(i.InstanceId)] = true
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	d.placing[req.Group] = slices.DeleteFunc(d.placing[req.Group], func(p *placement) bool {
		return !p.done.IsZero() && (listed[p.id] || now.Sub(p.done) > placingFor)
	})
	for _, p := range d.placing[req.Group] {
		count[p.subnet]++
	}
	best := d.cfg.Subnets[0]
	for _, s := range d.cfg.Subnets[1:] {
		if count[s] < count[best] {
			best = s
		}
	}
	p := &placement{subnet: best}
	d.placing[req.Group] = append(d.placing[req.Group], p)
	return best, p, nil
}

// placed ends p's create: made as instance id, or failed (err), when it
// counts no more.
func (d *Driver) placed(group string, p *placement, id string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil || id == "" {
		d.placing[group] = slices.DeleteFunc(d.placing[group], func(q *placement) bool { return q == p })
		return
	}
	p.id, p.done = id, time.Now()
}

// TagToken carries the create's idempotency token (its ClientToken) on
// the instance, by which a retried create finds what an attempt whose
// answer was lost made.
const TagToken = "shoal-create"

// byToken returns the instance an earlier attempt of req made, if any.
func (d *Driver) byToken(ctx context.Context, req cloud.CreateRequest) (cloud.Server, bool, error) {
	cctx, cancel := d.call(ctx)
	defer cancel()
	out, err := d.client.DescribeInstances(cctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: aws.String("tag:" + TagToken), Values: []string{req.Token}},
		{Name: aws.String("tag:" + cloud.TagOwner), Values: []string{req.Tags[cloud.TagOwner]}},
	}})
	if err != nil {
		return cloud.Server{}, false, d.apiErr(ctx, "DescribeInstances", err)
	}
	for _, r := range out.Reservations {
		if len(r.Instances) > 0 {
			return d.server(r.Instances[0]), true, nil
		}
	}
	return cloud.Server{}, false, nil
}

// runInput is the RunInstances request of req: the config's launch
// template, AMI, type (the one instance_types gives req's plan), network
// and market, and every tag at launch, so
// that no instance ever exists without its marker.
func (d *Driver) runInput(req cloud.CreateRequest, subnet string) (*ec2.RunInstancesInput, error) {
	c := d.cfg
	in := &ec2.RunInstancesInput{MinCount: aws.Int32(1), MaxCount: aws.Int32(1)}
	if lt := c.LaunchTemplate; lt != nil {
		spec := &types.LaunchTemplateSpecification{Version: aws.String(lt.Version)}
		if lt.ID != "" {
			spec.LaunchTemplateId = aws.String(lt.ID)
		} else {
			spec.LaunchTemplateName = aws.String(lt.Name)
		}
		in.LaunchTemplate = spec
	}
	if c.AMI != "" {
		in.ImageId = aws.String(c.AMI)
	}
	if subnet != "" {
		in.SubnetId = aws.String(subnet)
	}
	if d.userData != nil {
		ud, err := d.userData.Expand(UserData{Name: req.Name, Group: req.Group, Plan: req.Plan, Subnet: subnet,
			Owner: req.Tags[cloud.TagOwner], Index: req.Index, Port: d.port})
		if err != nil {
			return nil, fmt.Errorf("ec2: user_data of %s: %w", req.Name, err)
		}
		if len(ud[0]) > maxUserData {
			return nil, fmt.Errorf("ec2: user_data of %s expands to %d bytes; EC2 takes at most %d", req.Name, len(ud[0]), maxUserData)
		}
		in.UserData = aws.String(base64.StdEncoding.EncodeToString([]byte(ud[0])))
	}
	in.SecurityGroupIds = c.SecurityGroups
	if c.KeyName != "" {
		in.KeyName = aws.String(c.KeyName)
	}
	if p := c.IAMInstanceProfile; p != "" {
		in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Name: aws.String(p)}
		if strings.HasPrefix(p, "arn:") {
			in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Arn: aws.String(p)}
		}
	}
	if c.Market == Spot {
		spot := &types.SpotMarketOptions{
			SpotInstanceType: types.SpotInstanceTypeOneTime,
			// An interrupted spot instance is gone, and replaced like any
			// instance that exits; stopped, it would cost its volumes.
			InstanceInterruptionBehavior: types.InstanceInterruptionBehaviorTerminate,
		}
		if c.SpotMaxPrice != "" {
			spot.MaxPrice = aws.String(c.SpotMaxPrice)
		}
		in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot, SpotOptions: spot}
	}
	tags := maps.Clone(c.Tags)
	if tags == nil {
		tags = map[string]string{}
	}
	maps.Copy(tags, req.Tags)
	tags["Name"] = req.Name
	if req.Token != "" {
		in.ClientToken = aws.String(req.Token)
		tags[TagToken] = req.Token
	}
	var list []types.Tag
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		list = append(list, types.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
	}
	// The volumes and network interfaces carry the same tags, so that
	// cost reports and an operator's sweeps find what an instance owns.
	for _, rt := range []types.ResourceType{types.ResourceTypeInstance, types.ResourceTypeVolume, types.ResourceTypeNetworkInterface} {
		in.TagSpecifications = append(in.TagSpecifications, types.TagSpecification{ResourceType: rt, Tags: list})
	}
	return in, nil
}

// Delete terminates the instance. One that is already terminated, or that
// EC2 no longer knows, is gone: not an error.
func (d *Driver) Delete(ctx context.Context, id string) error {
	cctx, cancel := d.call(ctx)
	defer cancel()
	_, err := d.client.TerminateInstances(cctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if err != nil && !notFound(err) {
		return d.apiErr(ctx, "TerminateInstances", err)
	}
	return nil
}

// PowerOff stops the instance (StopInstances): a warm pool's server waits
// stopped, billed for its volumes only.
func (d *Driver) PowerOff(ctx context.Context, id string) error {
	cctx, cancel := d.call(ctx)
	defer cancel()
	if _, err := d.client.StopInstances(cctx, &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
		return d.apiErr(ctx, "StopInstances", err)
	}
	return nil
}

// PowerOn starts a stopped instance (StartInstances).
func (d *Driver) PowerOn(ctx context.Context, id string) error {
	cctx, cancel := d.call(ctx)
	defer cancel()
	if _, err := d.client.StartInstances(cctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}); err != nil {
		return d.apiErr(ctx, "StartInstances", err)
	}
	return nil
}

// List returns every instance tagged shoal-owner=owner, terminated ones
// (which EC2 lists for about an hour) as Gone, in one paged
// DescribeInstances: one call per pageSize instances, never one per
// instance.
func (d *Driver) List(ctx context.Context, owner string) ([]cloud.Server, error) {
	in := &ec2.DescribeInstancesInput{
		Filters:    []types.Filter{{Name: aws.String("tag:" + cloud.TagOwner), Values: []string{owner}}},
		MaxResults: aws.Int32(d.pageSize),
	}
	pages := ec2.NewDescribeInstancesPaginator(d.client, in, func(o *ec2.DescribeInstancesPaginatorOptions) {
		o.StopOnDuplicateToken = true
	})
	var out []cloud.Server
	// spot are the running spot instances listed: where, by ID.
	spot := map[string]int{}
	for pages.HasMorePages() {
		cctx, cancel := d.call(ctx)
		page, err := pages.NextPage(cctx)
		cancel()
		if err != nil {
			if rerr := d.checkRegion(ctx); rerr != nil && !errors.Is(rerr, cloud.ErrRetryable) {
				return nil, rerr
			}
			return nil, d.apiErr(ctx, "DescribeInstances", err)
		}
		for _, r := range page.Reservations {
			for _, i := range r.Instances {
				out = append(out, d.server(i))
				if i.InstanceLifecycle == types.InstanceLifecycleTypeSpot && i.State != nil && i.State.Name == types.InstanceStateNameRunning {
					spot[aws.ToString(i.InstanceId)] = len(out) - 1
				}
			}
		}
	}
	if len(spot) > 0 {
		if err := d.markInterrupted(ctx, out, spot); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// markInterrupted marks the listed spot instances whose request EC2 has
// marked for termination: the two-minute interruption notice, which
// shoal, not running on those instances, cannot read from their IMDS.
// It is one paged DescribeSpotInstanceRequests of the marked requests
// per listing, without EventBridge or anything to deploy.
func (d *Driver) markInterrupted(ctx context.Context, out []cloud.Server, spot map[string]int) error {
	pages := ec2.NewDescribeSpotInstanceRequestsPaginator(d.client, &ec2.DescribeSpotInstanceRequestsInput{
		Filters:    []types.Filter{{Name: aws.String("status-code"), Values: []string{interruptionCode}}},
		MaxResults: aws.Int32(d.pageSize),
	})
	for pages.HasMorePages() {
		cctx, cancel := d.call(ctx)
		page, err := pages.NextPage(cctx)
		cancel()
		if err != nil {
			return d.apiErr(ctx, "DescribeSpotInstanceRequests", err)
		}
		for _, r := range page.SpotInstanceRequests {
			if at, ok := spot[aws.ToString(r.InstanceId)]; ok {
				out[at].Interrupted = "spot interruption notice (" + interruptionCode + "): EC2 takes it back in about two minutes"
			}
		}
	}
	return nil
}

// interruptionCode is the spot request status of an interruption notice.
const interruptionCode = "marked-for-termination"

// checkRegion makes sure, once, that EC2 knows the configured region and
// the account may use it: a region the SDK resolves to an endpoint that
// does not exist (ap-northeast-9) otherwise fails every call as an outage
// would ("cannot reach", an HTTP 500), retried until create_timeout
// without naming the region. Its errors name the region; only those an
// outage may cause (no connection, throttling) are retryable.
func (d *Driver) checkRegion(ctx context.Context) error {
	d.mu.Lock()
	ok := d.regionOK
	d.mu.Unlock()
	if ok {
		return nil
	}
	region := d.cfg.Region
	cctx, cancel := d.call(ctx)
	defer cancel()
	out, err := d.client.DescribeRegions(cctx, &ec2.DescribeRegionsInput{AllRegions: aws.Bool(true)})
	if err != nil {
		e := d.apiErr(ctx, "DescribeRegions", err)
		var ae *apiError
		var dns *net.DNSError
		switch {
		case ctx.Err() != nil:
			return e
		case errors.As(e, &ae) && ae.code == "" && (errors.As(err, &dns) && dns.IsNotFound || !errors.Is(e, cloud.ErrRetryable) || ae.statusOnly):
			// No EC2 API answers for the region: its endpoint does not
			// exist, or answers with no API error (an emulator's 500).
			return fmt.Errorf("ec2: region %s: the EC2 API does not answer for it (%s): check region (an AWS region such as ap-northeast-1, enabled for the account)", region, ae.msg)
		}
		return fmt.Errorf("ec2: region %s: %w", region, e)
	}
	var names []string
	for _, r := range out.Regions {
		name := aws.ToString(r.RegionName)
		names = append(names, name)
		if name != region {
			continue
		}
		if aws.ToString(r.OptInStatus) == "not-opted-in" {
			return fmt.Errorf("ec2: region %s is not enabled for the account (opt-in region): enable it, or choose another region", region)
		}
		d.mu.Lock()
		d.regionOK = true
		d.mu.Unlock()
		return nil
	}
	slices.Sort(names)
	return fmt.Errorf("ec2: region %s: EC2 does not list it; regions: %s", region, strings.Join(names, ", "))
}

// server is i as the provider sees it.
func (d *Driver) server(i types.Instance) cloud.Server {
	s := cloud.Server{ID: aws.ToString(i.InstanceId), Tags: map[string]string{}, Created: aws.ToTime(i.LaunchTime)}
	for _, t := range i.Tags {
		s.Tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	s.Name = s.Tags["Name"]
	if s.Name == "" {
		// Someone removed the Name tag: the ID still names it in messages.
		s.Name = s.ID
	}
	if d.cfg.Address == AddressPublic {
		s.IP = aws.ToString(i.PublicIpAddress)
	} else {
		s.IP = aws.ToString(i.PrivateIpAddress)
	}
	if i.State != nil {
		s.State = string(i.State.Name)
	}
	if i.Placement != nil {
		s.Zone = aws.ToString(i.Placement.AvailabilityZone)
	}
	s.Phase = phase(s.State)
	return s
}

// phase maps an EC2 instance state to the provider's phases:
//
//	pending ──> running ──> stopping ──> stopped
//	   │           │                        │
//	   │           └──> shutting-down <─────┘ (terminate)
//	   │                      │
//	   └──────────────────────┴──> terminated
//
//	pending → Pending; running → Running;
//	shutting-down, stopping → Stopping; stopped → Stopped;
//	terminated → Gone.
//
// A stopped instance is not Gone: it still exists and costs its volumes,
// so the provider terminates it rather than forget it (or keeps it, as a
// warm pool's server).
func phase(state string) cloud.Phase {
	switch types.InstanceStateName(state) {
	case types.InstanceStateNamePending:
		return cloud.Pending
	case types.InstanceStateNameRunning:
		return cloud.Running
	case types.InstanceStateNameShuttingDown, types.InstanceStateNameStopping:
		return cloud.Stopping
	case types.InstanceStateNameStopped:
		return cloud.Stopped
	case types.InstanceStateNameTerminated:
		return cloud.Gone
	}
	// A state this driver does not know yet: waited on like a boot, which
	// the provider's boot timeout bounds.
	return cloud.Pending
}
