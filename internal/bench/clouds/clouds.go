package clouds

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	client "github.com/sacloud/api-client-go"
	"github.com/sacloud/iaas-api-go"
	"github.com/sacloud/iaas-api-go/fake"
	sacapi "github.com/sacloud/iaas-api-go/helper/api"
	"github.com/sacloud/iaas-api-go/search"
	sactypes "github.com/sacloud/iaas-api-go/types"

	"github.com/shoal-lb/shoal/internal/testmoto"

	"github.com/shoal-lb/shoal/internal/bench"
)

// clouds measures each cloud provider against its test cloud: the exec
// driver's script (testdata/fakecloud.sh, whose servers are demo-backend
// processes), ec2 against moto, and sacloud against iaas-api-go's fake.
// Per provider, the time from a job scaling a group 0 → N to all N in
// service, and what the scale-out and the scale-in back to 0 cost in API
// calls by kind (shoal_cloud_api_calls_total, read from shoal's
// Prometheus endpoint). The baseline, measured in the same run, is the
// emulator's own latency per call (create, list, delete), timed straight
// to it with a state of its own: an emulator answers in
// milliseconds where a cloud takes minutes to boot a server, so these
// times are shoal's overhead over a fast API, not a cloud's.
var Command = &bench.Command{
	Name:    "clouds",
	Summary: "cloud providers on their emulators: time to N in service, API calls per scale event, emulator latency",
	Run:     runClouds,
}

// cloudRun is one provider's measurement.
type cloudRun struct {
	Provider string `json:"provider"`
	Emulator string `json:"emulator"`
	// ToInService is the scale-out job's time, 0 → N in service; ToZero
	// the scale-in job's, N → 0 (every server deleted).
	ToInService float64 `json:"to_in_service_s"`
	ToZero      float64 `json:"to_zero_s"`
	// Out and In are the API calls of the scale-out and the scale-in.
	Out cloudCalls `json:"scale_out_calls"`
	In  cloudCalls `json:"scale_in_calls"`
	// CallMS is the emulator's own latency per call kind, the median of
	// the baseline's calls, in milliseconds.
	CallMS map[string]float64 `json:"emulator_call_ms"`
}

// cloudCalls counts API calls by kind.
type cloudCalls struct {
	Create int `json:"create"`
	List   int `json:"list"`
	Delete int `json:"delete"`
}

func (c cloudCalls) minus(o cloudCalls) cloudCalls {
	return cloudCalls{Create: c.Create - o.Create, List: c.List - o.List, Delete: c.Delete - o.Delete}
}

// cloudEmu is one provider on its emulator.
type cloudEmu struct {
	name, emulator string
	// entry is the providers entry (YAML list item) named "cloud".
	entry string
	// endpoint is moto's URL (ec2 only).
	endpoint string
	close    func()
}

func runClouds(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	n := fs.Int("instances", 10, "instances per scale-out")
	which := fs.String("providers", "exec,ec2,sacloud", "providers to measure, comma-separated")
	samples := fs.Int("samples", 5, "baseline calls of each kind per emulator")
	timeout := fs.Duration("timeout", 3*time.Minute, "longest a scale job may take")
	var bins bench.BinFlags
	bins.Register(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if *n < 1 || *n > 50 || *samples < 1 || *timeout < 10*time.Second {
		return nil, bench.BadUsage("-instances 1..50, -samples >= 1 and -timeout >= 10s please")
	}
	backend, sbin, err := bins.Resolve()
	if err != nil {
		return nil, err
	}
	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	var runs []cloudRun
	for name := range strings.SplitSeq(*which, ",") {
		emu, err := startCloudEmu(ctx, env, strings.TrimSpace(name), backend)
		if err != nil {
			return nil, err
		}
		r, err := measureCloud(ctx, env, emu, sbin, *n, *samples, *timeout)
		emu.close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", emu.name, err)
		}
		env.Log.Info("cloud measured", "provider", r.Provider, "to_in_service_s", bench.Round2(r.ToInService), "scale_out_calls", r.Out, "scale_in_calls", r.In, "emulator_call_ms", r.CallMS)
		runs = append(runs, r)
	}
	rep.Details = runs
	for _, r := range runs {
		perCall := r.CallMS["create"] + r.CallMS["list"]
		rep.Figures = append(rep.Figures, bench.Figure{
			Name: fmt.Sprintf("%s: scale 0 → %d, job to all in service", r.Provider, *n), Unit: "s", Value: bench.Num(r.ToInService),
			Baseline: fmt.Sprintf("%s: one create + one list", r.Emulator), BaselineValue: bench.Num(perCall / 1000), Ratio: bench.RatioOf(bench.Num(r.ToInService), bench.Num(perCall/1000)),
			Note: "the emulator's own speed, not a cloud's: a real server boots in minutes (the seeds' Sakura Cloud: about 3.5 min)",
		}, bench.Figure{
			Name: fmt.Sprintf("%s: listings during the scale-out of %d", r.Provider, *n), Value: bench.Num(float64(r.Out.List)),
			Goal:    fmt.Sprintf("< %d (no listing per instance)", *n),
			Verdict: bench.Verdict(bench.Num(float64(r.Out.List)), func(v float64) bool { return v < float64(*n) }),
			Note:    fmt.Sprintf("one listing per interval (1 s while servers boot) whatever the number of servers; %d creates", r.Out.Create),
		}, bench.Figure{
			Name: fmt.Sprintf("%s: creates and deletes per instance, 0 → %d → 0", r.Provider, *n), Value: bench.Num(float64(r.Out.Create+r.In.Delete) / float64(*n)),
			Goal: "2 (one create, one delete each)", Verdict: bench.Verdict(bench.Num(float64(r.Out.Create+r.In.Delete)/float64(*n)), func(v float64) bool { return v == 2 }),
		})
	}
	rep.Settings = []bench.Setting{
		{Name: "group", Value: fmt.Sprintf("min 0, max %d; health check every 100 ms, rise 1; stand-ins: demo-backend on 127.0.0.1 (the emulators' addresses are never used)", *n)},
		{Name: "providers", Value: "interval 1s; exec: testdata/fakecloud.sh (sh, jq, flock; servers are demo-backend processes on 127.0.1xx.y); ec2: moto_server on 127.0.0.1; sacloud: iaas-api-go's fake (fake_mode, a store file)"},
		{Name: "events", Value: fmt.Sprintf("one job 0 → %d, timed from the request to the job's end (all in service), then one job back to 0", *n)},
		{Name: "baseline", Value: fmt.Sprintf("%d creates, lists and deletes of one server per emulator, straight to it (the script as a command, moto through the AWS SDK, the sacloud fake through iaas-api-go: a bare server, where shoal's driver also copies a disk and boots it), with a state and an owner tag of their own, one at a time; the median", *samples)},
	}
	var md strings.Builder
	md.WriteString("These emulators answer in milliseconds; a cloud takes minutes to boot a server. The times above are shoal's own\noverhead over a fast API, and the calls are what a real cloud would be asked.\n\n")
	md.WriteString("| provider | emulator | 0 → N | N → 0 | scale-out calls (create/list/delete) | scale-in calls | emulator create | list | delete |\n|---|---|---:|---:|---|---|---:|---:|---:|\n")
	for _, r := range runs {
		fmt.Fprintf(&md, "| %s | %s | %.2f s | %.2f s | %d / %d / %d | %d / %d / %d | %.1f ms | %.1f ms | %.1f ms |\n",
			r.Provider, r.Emulator, r.ToInService, r.ToZero, r.Out.Create, r.Out.List, r.Out.Delete, r.In.Create, r.In.List, r.In.Delete,
			r.CallMS["create"], r.CallMS["list"], r.CallMS["delete"])
	}
	rep.Markdown = md.String()
	return rep, nil
}

// startCloudEmu starts the emulator of provider name and returns its
// providers entry (stand-ins where the emulator's servers cannot serve).
func startCloudEmu(ctx context.Context, env *bench.Env, name, backend string) (*cloudEmu, error) {
	dir := filepath.Join(env.Work, "cloud-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	standIn := fmt.Sprintf(`{stand_in: [%q, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"]}`, backend)
	port, err := env.FreePort()
	if err != nil {
		return nil, err
	}
	switch name {
	case "exec":
		script, err := filepath.Abs("internal/provider/cloud/exec/testdata/fakecloud.sh")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "backend"), []byte(backend), 0o644); err != nil {
			return nil, err
		}
		argv := func(args ...string) string {
			q := []string{strconv.Quote("sh"), strconv.Quote(script), strconv.Quote(dir)}
			for _, a := range args {
				q = append(q, strconv.Quote(a))
			}
			return "[" + strings.Join(q, ", ") + "]"
		}
		entry := fmt.Sprintf("  - name: cloud\n    type: exec\n    port: %d\n    interval: 1s\n    boot_timeout: 1m\n    timeout: 30s\n    start: %s\n    stop: %s\n    list: %s\n",
			port, argv("start", "{{.Name}}", "{{.Port}}"), argv("stop", "{{.ID}}"), argv("list", "{{.Owner}}"))
		return &cloudEmu{name: name, emulator: "fakecloud.sh", entry: entry, close: func() { killExecServers(dir) }}, nil
	case "ec2":
		srv, err := testmoto.Start(ctx)
		if err != nil {
			return nil, err
		}
		creds := filepath.Join(dir, "credentials")
		if err := os.WriteFile(creds, []byte("[shoal]\naws_access_key_id = testing\naws_secret_access_key = testing\n"), 0o600); err != nil {
			srv.Close()
			return nil, err
		}
		if err := motoLaunchTemplate(ctx, srv.Endpoint); err != nil {
			srv.Close()
			return nil, err
		}
		entry := fmt.Sprintf("  - name: cloud\n    type: ec2\n    port: 8080\n    interval: 1s\n    boot_timeout: 1m\n    region: us-east-1\n    endpoint: %s\n    credentials_file: %s\n    profile: shoal\n    launch_template: {name: web, version: \"$Latest\"}\n    emulator: %s\n",
			srv.Endpoint, creds, standIn)
		return &cloudEmu{name: name, emulator: "moto", entry: entry, endpoint: srv.Endpoint, close: srv.Close}, nil
	case "sacloud":
		entry := fmt.Sprintf(`  - name: cloud
    type: sacloud
    port: 80
    interval: 1s
    boot_timeout: 1m
    zone: tk1b
    fake_mode: true
    fake_store_path: %s
    emulator: %s
    template:
      plan: {core: 1, memory: 1}
      network_interfaces: [{upstream: shared}]
      disks: [{os_type: almalinux, plan: ssd, connection: virtio, size: 20}]
`, filepath.Join(dir, "fake-store.json"), standIn)
		return &cloudEmu{name: name, emulator: "iaas-api-go fake", entry: entry, close: func() {}}, nil
	}
	return nil, bench.BadUsage("-providers: unknown provider %q (exec, ec2, sacloud)", name)
}

// motoClient is an EC2 client of moto at endpoint (on 127.0.0.1).
func motoClient(endpoint string) *awsec2.Client {
	return awsec2.NewFromConfig(aws.Config{
		Region: "us-east-1",
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "testing", SecretAccessKey: "testing"}, nil
		}),
		BaseEndpoint: aws.String(endpoint),
	})
}

// motoLaunchTemplate makes the launch template the ec2 entry names.
func motoLaunchTemplate(ctx context.Context, endpoint string) error {
	c := motoClient(endpoint)
	imgs, err := c.DescribeImages(ctx, &awsec2.DescribeImagesInput{})
	if err != nil || len(imgs.Images) == 0 {
		return fmt.Errorf("moto: DescribeImages: %v (%d images)", err, len(imgs.Images))
	}
	_, err = c.CreateLaunchTemplate(ctx, &awsec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String("web"),
		LaunchTemplateData: &types.RequestLaunchTemplateData{ImageId: imgs.Images[0].ImageId, InstanceType: types.InstanceTypeT3Micro},
	})
	if err != nil {
		return fmt.Errorf("moto: CreateLaunchTemplate: %w", err)
	}
	return nil
}

// killExecServers stops what fakecloud.sh's servers under dir left
// running (a run that failed half-way).
func killExecServers(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "servers", "*.json"))
	more, _ := filepath.Glob(filepath.Join(dir, "baseline", "servers", "*.json"))
	var pids []int
	for _, f := range append(files, more...) {
		var s struct {
			PID int `json:"pid"`
		}
		if b, err := os.ReadFile(f); err == nil && json.Unmarshal(b, &s) == nil && s.PID > 0 {
			pids = append(pids, s.PID)
		}
	}
	bench.KillAll(pids)
}

// measureCloud runs shoal on emu's provider: 0 → n → 0, timed and
// counted, then the emulator's own latency per call.
func measureCloud(ctx context.Context, env *bench.Env, emu *cloudEmu, sbin string, n, samples int, timeout time.Duration) (cloudRun, error) {
	r := cloudRun{Provider: emu.name, Emulator: emu.emulator}
	metricsPort, err := env.FreePort()
	if err != nil {
		return r, err
	}
	sh, err := env.StartShoalOn(sbin, func(port int) string {
		return fmt.Sprintf(`listen: 127.0.0.1:%d
state_dir: %s
metrics: {listen: "127.0.0.1:%d"}
providers:
%sgroups:
  - name: web
    min_size: 0
    max_size: %d
    provider: cloud
    cooldown: {up: 0s, down: 0s}
    drain_timeout: 2s
    health: {path: /healthz, interval: 100ms, rise: 1, fall: 3, timeout: 1s, grace: 1m}
`, port, filepath.Join(env.Work, "state-"+emu.name), metricsPort, emu.entry, n)
	})
	if err != nil {
		return r, err
	}
	stopped := false
	defer func() {
		if !stopped {
			sh.Proc.Stop()
		}
	}()
	if err := sh.WaitInService(ctx, "web", 0, 30*time.Second, bench.PollEvery); err != nil {
		return r, err
	}
	scrape := func() (cloudCalls, error) { return scrapeCloudCalls(ctx, metricsPort, "cloud") }
	before, err := scrape()
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	if err := sh.API.Size(ctx, "web", n, timeout); err != nil {
		return r, fmt.Errorf("%w: %s", err, sh.LogTail(5))
	}
	r.ToInService = time.Since(t0).Seconds()
	if got, err := sh.API.InService(ctx, "web"); err != nil || got != n {
		return r, fmt.Errorf("after the scale-out %d of %d in service (%v): %s", got, n, err, sh.LogTail(5))
	}
	out, err := scrape()
	if err != nil {
		return r, err
	}
	r.Out = out.minus(before)
	t0 = time.Now()
	if err := sh.API.Size(ctx, "web", 0, timeout); err != nil {
		return r, fmt.Errorf("%w: %s", err, sh.LogTail(5))
	}
	r.ToZero = time.Since(t0).Seconds()
	in, err := scrape()
	if err != nil {
		return r, err
	}
	r.In = in.minus(out)
	// The baseline runs alone.
	sh.Proc.Stop()
	stopped = true

	r.CallMS, err = emulatorLatency(ctx, env, emu, samples)
	return r, err
}

// scrapeCloudCalls reads provider's shoal_cloud_api_calls_total from
// shoal's Prometheus endpoint.
func scrapeCloudCalls(ctx context.Context, port int, provider string) (cloudCalls, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return cloudCalls{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return cloudCalls{}, fmt.Errorf("shoal's metrics: %w", err)
	}
	defer resp.Body.Close()
	var c cloudCalls
	found := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "shoal_cloud_api_calls_total{") || !strings.Contains(line, `provider="`+provider+`"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return c, fmt.Errorf("shoal's metrics: %q: %w", line, err)
		}
		switch {
		case strings.Contains(line, `call="create"`):
			c.Create = int(v)
		case strings.Contains(line, `call="list"`):
			c.List = int(v)
		case strings.Contains(line, `call="delete"`):
			c.Delete = int(v)
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return c, fmt.Errorf("shoal's metrics: %w", err)
	}
	if found != 3 {
		return c, fmt.Errorf("shoal's metrics: %d shoal_cloud_api_calls_total series of provider %s, want 3", found, provider)
	}
	return c, nil
}

// emulatorLatency times samples creates, lists and deletes of one
// server, straight to emu's emulator (the script run as a command, moto
// through the AWS SDK, the sacloud fake through iaas-api-go) with a state
// of their own and an owner tag shoal never lists: the emulator's own
// speed per call, not shoal's. A sacloud create is the server alone (the
// driver also copies a disk and boots it, several calls more).
func emulatorLatency(ctx context.Context, env *bench.Env, emu *cloudEmu, samples int) (map[string]float64, error) {
	base := filepath.Join(env.Work, "cloud-"+emu.name, "baseline")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, err
	}
	var (
		calls emuCalls
		err   error
	)
	switch emu.name {
	case "exec":
		calls, err = execCalls(env, emu, base)
	case "ec2":
		calls, err = motoCalls(emu)
	case "sacloud":
		calls, err = sacloudFakeCalls(filepath.Join(base, "fake-store.json"))
	}
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	times := map[string][]float64{}
	timed := func(kind string, f func() error) error {
		t0 := time.Now()
		err := f()
		times[kind] = append(times[kind], bench.Msf(time.Since(t0)))
		if err != nil {
			return fmt.Errorf("emulator %s: %w", kind, err)
		}
		return nil
	}
	var errs []error
	for i := range samples {
		name := fmt.Sprintf("base-%03d", i+1)
		var id string
		if err := timed("create", func() error { var err error; id, err = calls.create(ctx, name); return err }); err != nil {
			errs = append(errs, err)
			break
		}
		if err := timed("list", func() error { return calls.list(ctx) }); err != nil {
			errs = append(errs, err)
		}
		if err := timed("delete", func() error { return calls.delete(ctx, id) }); err != nil {
			errs = append(errs, err)
		}
	}
	out := map[string]float64{}
	for k, v := range times {
		out[k] = bench.Round2(bench.Median(slices.Clone(v)))
	}
	return out, errors.Join(errs...)
}

// emuCalls are one emulator's create, list and delete of a server.
type emuCalls struct {
	create func(ctx context.Context, name string) (id string, err error)
	list   func(ctx context.Context) error
	delete func(ctx context.Context, id string) error
}

// baselineOwner is the owner tag of the baseline's servers.
const baselineOwner = "shoal-bench-baseline"

// execCalls runs fakecloud.sh as the exec driver would, on a directory of
// its own.
func execCalls(env *bench.Env, emu *cloudEmu, base string) (emuCalls, error) {
	dir := filepath.Join(env.Work, "cloud-"+emu.name)
	backend, err := os.ReadFile(filepath.Join(dir, "backend"))
	if err != nil {
		return emuCalls{}, err
	}
	if err := os.WriteFile(filepath.Join(base, "backend"), backend, 0o644); err != nil {
		return emuCalls{}, err
	}
	script, err := filepath.Abs("internal/provider/cloud/exec/testdata/fakecloud.sh")
	if err != nil {
		return emuCalls{}, err
	}
	port, err := env.FreePort()
	if err != nil {
		return emuCalls{}, err
	}
	run := func(ctx context.Context, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "sh", append([]string{script, base}, args...)...)
		cmd.Env = append(os.Environ(), fmt.Sprintf(`SHOAL_TAGS={"shoal-owner": %q}`, baselineOwner))
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("fakecloud.sh %s: %w", args[0], err)
		}
		return out, nil
	}
	return emuCalls{
		create: func(ctx context.Context, name string) (string, error) {
			out, err := run(ctx, "start", name, strconv.Itoa(port))
			if err != nil {
				return "", err
			}
			var s struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(out, &s); err != nil || s.ID == "" {
				return "", fmt.Errorf("fakecloud.sh start printed %q", out)
			}
			return s.ID, nil
		},
		list:   func(ctx context.Context) error { _, err := run(ctx, "list", baselineOwner); return err },
		delete: func(ctx context.Context, id string) error { _, err := run(ctx, "stop", id); return err },
	}, nil
}

// motoCalls launches from the launch template, describes by the owner
// tag and terminates, through the AWS SDK.
func motoCalls(emu *cloudEmu) (emuCalls, error) {
	c := motoClient(emu.endpoint)
	return emuCalls{
		create: func(ctx context.Context, name string) (string, error) {
			out, err := c.RunInstances(ctx, &awsec2.RunInstancesInput{
				MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
				LaunchTemplate: &types.LaunchTemplateSpecification{LaunchTemplateName: aws.String("web")},
				TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeInstance,
					Tags: []types.Tag{{Key: aws.String("shoal-owner"), Value: aws.String(baselineOwner)}, {Key: aws.String("Name"), Value: aws.String(name)}}}},
			})
			if err != nil {
				return "", err
			}
			return aws.ToString(out.Instances[0].InstanceId), nil
		},
		list: func(ctx context.Context) error {
			_, err := c.DescribeInstances(ctx, &awsec2.DescribeInstancesInput{
				Filters: []types.Filter{{Name: aws.String("tag:shoal-owner"), Values: []string{baselineOwner}}},
			})
			return err
		},
		delete: func(ctx context.Context, id string) error {
			_, err := c.TerminateInstances(ctx, &awsec2.TerminateInstancesInput{InstanceIds: []string{id}})
			return err
		},
	}, nil
}

// sacloudFakeCalls creates, finds by tag and deletes a server in
// iaas-api-go's fake, keeping its state in store. The fake replaces the
// API for the whole process: the benchmark never talks to the real one.
func sacloudFakeCalls(store string) (emuCalls, error) {
	js := fake.NewJSONFileStore(store)
	// A context already done stops the store's file watcher as it starts
	// (it would reload the file on every write, logging each).
	done, stop := context.WithCancel(context.Background())
	stop()
	js.Ctx = done
	fake.DataStore = js
	fake.SwitchFactoryFuncToFake()
	sacapi.SetupFakeDefaults()
	fake.InitDataStore()
	op := iaas.NewServerOp(iaas.NewClientWithOptions(&client.Options{}))
	const zone = "tk1b"
	tag := "shoal-o=" + baselineOwner
	return emuCalls{
		create: func(ctx context.Context, name string) (string, error) {
			srv, err := op.Create(ctx, zone, &iaas.ServerCreateRequest{CPU: 1, MemoryMB: 1024, Commitment: sactypes.Commitments.Standard,
				Generation: sactypes.PlanGenerations.Default, ConnectedSwitches: []*iaas.ConnectedSwitch{{Scope: sactypes.Scopes.Shared}},
				InterfaceDriver: sactypes.InterfaceDrivers.VirtIO, Name: name, Tags: sactypes.Tags{tag}})
			if err != nil {
				return "", err
			}
			return srv.ID.String(), nil
		},
		list: func(ctx context.Context) error {
			_, err := op.Find(ctx, zone, &iaas.FindCondition{Filter: search.Filter{search.Key("Tags.Name"): search.TagsAndEqual(tag)}})
			return err
		},
		delete: func(ctx context.Context, id string) error {
			return op.Delete(ctx, zone, sactypes.StringID(id))
		},
	}, nil
}
