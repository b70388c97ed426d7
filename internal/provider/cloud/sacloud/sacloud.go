// Package sacloud is the cloud.Driver of Sakura Cloud: a server group as
// sacloud/autoscaler's ServerGroup defines it, through iaas-api-go. A server
// is created the way the autoscaler's server-horizontal-scaler creates one
// (server with its NICs, disks from a source archive with the first one's OS
// edited, then boot), and removed the way it removes one (shutdown, forced
// if the config says so, then delete with its disks).
package sacloud

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	client "github.com/sacloud/api-client-go"
	"github.com/sacloud/iaas-api-go"
	"github.com/sacloud/iaas-api-go/fake"
	"github.com/sacloud/iaas-api-go/helper/api"
	"github.com/sacloud/iaas-api-go/helper/power"
	"github.com/sacloud/iaas-api-go/helper/query"
	"github.com/sacloud/iaas-api-go/ostype"
	"github.com/sacloud/iaas-api-go/search"
	"github.com/sacloud/iaas-api-go/types"

	"github.com/shoal-lb/shoal/internal/provider/cloud"
)

// Driver creates, lists and deletes one group's servers in one zone.
type Driver struct {
	cfg  Config
	zone string
	log  *slog.Logger

	servers  iaas.ServerAPI
	disks    iaas.DiskAPI
	ifaces   iaas.InterfaceAPI
	archives iaas.ArchiveAPI
	switches iaas.SwitchAPI
	notes    iaas.NoteAPI
	plans    iaas.ServerPlanAPI
	zones    iaas.ZoneAPI

	// mu guards the IDs the template's selectors resolved to (archives and
	// switches are looked up once, not once per server), and creating.
	mu         sync.Mutex
	archiveIDs map[int]types.ID
	switchIDs  map[int]types.ID
	// plansSold are the server sizes the zone's plan list has, once found.
	plansSold map[Plan]bool
	// creating counts the creates in flight by instance name: their
	// startup-script notes are in use, not strays (see SweepStrays).
	creating map[string]int
	// poweredOff are the servers PowerOff shut down (a warm pool's), by
	// ID: listed stopped once down, as the API's InstanceBeforeStatus
	// (up) says too, which not every API (the fake) keeps.
	poweredOff map[string]bool
}

var (
	_ cloud.Driver        = (*Driver)(nil)
	_ cloud.Sweeper       = (*Driver)(nil)
	_ cloud.ShutdownModer = (*Driver)(nil)
	_ cloud.PowerDriver   = (*Driver)(nil)
)

// PowerOff shuts a warm pool's server down (gracefully, or forced as
// shutdown_force says) and returns once the API accepted it: it is listed
// stopped once down.
func (d *Driver) PowerOff(ctx context.Context, id string) error {
	sid := types.StringID(id)
	if err := d.servers.Shutdown(ctx, d.zone, sid, &iaas.ShutdownOption{Force: d.cfg.ShutdownForce}); err != nil {
		return apiError("shut down server "+id, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.poweredOff == nil {
		d.poweredOff = map[string]bool{}
	}
	d.poweredOff[id] = true
	return nil
}

// PowerOn boots a warm pool's stopped server and returns once the API
// accepted it.
func (d *Driver) PowerOn(ctx context.Context, id string) error {
	if err := d.servers.Boot(ctx, d.zone, types.StringID(id)); err != nil {
		return apiError("boot server "+id, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.poweredOff, id)
	return nil
}

// ShutdownMode is how Delete shuts a running server down: "forced" (a
// power-off) with shutdown_force, else "graceful" (an ACPI shutdown).
func (d *Driver) ShutdownMode() string {
	if d.cfg.ShutdownForce {
		return "forced"
	}
	return "graceful"
}

// listPage is how many servers one List call asks for.
const listPage = 100

// cleanupTimeout bounds the removal of a half-created server after Create
// failed, and of its startup scripts' notes (its ctx may be the one that
// ended).
const cleanupTimeout = 2 * time.Minute

// New builds the driver. The API keys come from cfg.CredentialsFile or the
// environment (SAKURACLOUD_ACCESS_TOKEN, SAKURACLOUD_ACCESS_TOKEN_SECRET);
// with cfg.FakeMode every call goes to iaas-api-go's in-process fake.
func New(cfg Config, log *slog.Logger) (cloud.Driver, error) {
	if log == nil {
		log = slog.Default()
	}
	caller, err := newCaller(cfg, log)
	if err != nil {
		return nil, err
	}
	return &Driver{
		cfg:        cfg,
		zone:       cfg.Zone,
		log:        log,
		servers:    iaas.NewServerOp(caller),
		disks:      iaas.NewDiskOp(caller),
		ifaces:     iaas.NewInterfaceOp(caller),
		archives:   iaas.NewArchiveOp(caller),
		switches:   iaas.NewSwitchOp(caller),
		notes:      iaas.NewNoteOp(caller),
		plans:      iaas.NewServerPlanOp(caller),
		zones:      iaas.NewZoneOp(caller),
		plansSold:  map[Plan]bool{},
		archiveIDs: map[int]types.ID{},
		switchIDs:  map[int]types.ID{},
		creating:   map[string]int{},
	}, nil
}

// mode is which API this process talks to: iaas-api-go's fake replaces the
// real API for every client of the process once switched on, so a process
// uses one or the other, and the fake with one store.
var mode struct {
	sync.Mutex
	fake, real bool
	store      string
	err        error
}

func newCaller(cfg Config, log *slog.Logger) (iaas.APICaller, error) {
	mode.Lock()
	defer mode.Unlock()
	if cfg.FakeMode {
		if err := useFake(cfg.FakeStorePath, log); err != nil {
			return nil, err
		}
		return iaas.NewClientWithOptions(&client.Options{}), nil
	}
	if mode.fake {
		return nil, errors.New("sacloud: this process uses the fake API (fake_mode), which has replaced the real one; restart shoal to use the real API")
	}
	token, secret, err := credentials(cfg)
	if err != nil {
		return nil, err
	}
	mode.real = true
	c := api.NewCallerWithOptions(&api.CallerOptions{Options: &client.Options{
		AccessToken:        token,
		AccessTokenSecret:  secret,
		HttpRequestTimeout: 60,
		// The provider retries with back-off; the SDK's own retries of
		// 423 and 503 are kept short so that a job sees the outage.
		RetryMax:     2,
		RetryWaitMin: 1,
		RetryWaitMax: 5,
	}})
	if cfg.APIRootURL != "" {
		return &rootCaller{next: c, root: cfg.APIRootURL}, nil
	}
	return c, nil
}

// rootCaller sends one provider's calls to its api_root_url: iaas-api-go
// builds every URL from a process-wide root (iaas.SakuraCloudAPIRoot),
// which this replaces per call, leaving other providers' alone.
type rootCaller struct {
	next iaas.APICaller
	root string
}

func (r *rootCaller) Do(ctx context.Context, method, uri string, body any) ([]byte, error) {
	if rest, ok := strings.CutPrefix(uri, iaas.SakuraCloudAPIRoot); ok {
		uri = r.root + rest
	}
	return r.next.Do(ctx, method, uri, body)
}

// useFake switches the process to the fake API; mode is locked.
func useFake(store string, log *slog.Logger) error {
	switch {
	case mode.err != nil:
		return mode.err
	case mode.real:
		return errors.New("sacloud: this process already uses the real API; restart shoal to use the fake one (fake_mode)")
	case mode.fake && store != mode.store:
		return fmt.Errorf("sacloud: the fake API already keeps its state in %q; restart shoal to change fake_store_path", mode.store)
	case mode.fake:
		return nil
	}
	// The store's file watcher would reload the whole file on every write,
	// its own too, logging each to stderr: its context ends once the store
	// is loaded, which stops it. (Ended before, the watcher can close
	// before it is added to, and the fake panics.) The file is read at
	// start and written on every change, which is what a restarted shoal
	// needs; changes another process makes meanwhile are not seen.
	stopWatcher := func() {}
	var fs *fileStore
	if store != "" {
		js := fake.NewJSONFileStore(store)
		ctx, stop := context.WithCancel(context.Background())
		js.Ctx, stopWatcher = ctx, stop
		fs = &fileStore{JSONFileStore: js, path: store, log: log}
		fake.DataStore = fs
	}
	fake.SwitchFactoryFuncToFake()
	api.SetupFakeDefaults()
	// InitDataStore panics on a store it cannot read; that is bad input
	// (fake_store_path), not a bug, so it becomes an error, for good: the
	// fake initialises once per process.
	func() {
		defer func() {
			if r := recover(); r != nil {
				mode.err = fmt.Errorf("sacloud: fake API store %s: %v", store, r)
			}
		}()
		fake.InitDataStore()
	}()
	stopWatcher()
	if mode.err == nil && fs != nil {
		if err := fs.seeded(); err != nil {
			mode.err = fmt.Errorf("sacloud: fake API store %s: %w", store, err)
		}
	}
	if mode.err != nil {
		return mode.err
	}
	mode.fake, mode.store = true, store
	return nil
}

// fileStore is the fake's JSON file store made fit for a process that may
// be killed: every change is written to a temporary file renamed over the
// store (the SDK truncates the store and writes it in place, so a kill -9
// in between left an empty store: every server forgotten). It also has the
// fake seed its data (zones, archives, plans, the shared segment) at every
// start, over what the file holds: the fake keeps the shared segment's
// switch in a variable only seeding sets (iaas-api-go v1.29.3), so a store
// loaded without it panics on the first server with a NIC on the shared
// segment. Seeding again overwrites the fixed resources and adds a shared
// switch and a few plans, which nothing here selects. What seeding puts is
// kept aside and written once (seeded): the SDK writes the whole store at
// every Put, and seeding puts hundreds of resources, seconds of CPU.
type fileStore struct {
	*fake.JSONFileStore
	path string // the store; the SDK's writes go to path.tmp
	log  *slog.Logger
	mu   sync.Mutex
	// seed is what was put while the fake seeds (from Init to seeded), by
	// "resource/zone" and ID as the SDK keeps it; nil otherwise.
	seed fake.JSONFileStoreData
}

func (s *fileStore) Init() error {
	if err := s.JSONFileStore.Init(); err != nil {
		return err
	}
	s.JSONFileStore.Path = s.path + ".tmp"
	s.settle()
	s.mu.Lock()
	s.seed = fake.JSONFileStoreData{}
	s.mu.Unlock()
	return nil
}

// seeded ends seeding: it writes what was seeded over the store's file, in
// one write, as the SDK's Put would have (the same resource's entry
// replaced), and has the SDK's store read the file back.
func (s *fileStore) seeded() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	seed := s.seed
	s.seed = nil
	if len(seed) == 0 {
		return nil
	}
	added, err := seed.MarshalJSON()
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	var add, entries []json.RawMessage
	if err := json.Unmarshal(added, &add); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	old, err := os.ReadFile(s.path)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(old))) > 0 {
		if err := json.Unmarshal(old, &entries); err != nil {
			return err
		}
	}
	type key struct{ ID, ZoneName, ResourceType string }
	keyOf := func(e json.RawMessage) (k key) {
		_ = json.Unmarshal(e, &k) // each entry has them: the SDK's format
		return k
	}
	replaced := map[key]bool{}
	for _, e := range add {
		replaced[keyOf(e)] = true
	}
	entries = slices.DeleteFunc(entries, func(e json.RawMessage) bool { return replaced[keyOf(e)] })
	data, err := json.MarshalIndent(append(entries, add...), "", "\t")
	if err != nil {
		return err
	}
	if err := os.WriteFile(s.path+".tmp", data, 0o600); err != nil {
		return err
	}
	s.commit()
	// Read back by Init, with a watcher of its own, stopped once it has
	// read (it is added before Init returns; see useFake).
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	s.JSONFileStore.Ctx, s.JSONFileStore.Path = ctx, s.path
	err = s.JSONFileStore.Init()
	s.JSONFileStore.Path = s.path + ".tmp"
	return err
}

// settle finishes what a killed process left half-done in the fake, where
// a real cloud's API is atomic or finishes on its own. The fake runs a
// disk copy or a shutdown as a goroutine of the process that asked, so
// after a kill -9 the store holds a disk migrating or a server cleaning
// for ever: a stray server swept at the next start would wait for its disk
// until the delete timeout, while its replacement is created beside it.
func (s *fileStore) settle() {
	for _, zone := range types.ZoneNames {
		for _, v := range s.List(fake.ResourceDisk, zone) {
			if d, ok := v.(*iaas.Disk); ok && d.Availability.IsMigrating() {
				d.Availability, d.MigratedMB = types.Availabilities.Available, d.SizeMB
				s.Put(fake.ResourceDisk, zone, d.ID, d)
				s.log.Info("sacloud fake: disk copy left by a stopped process finished", "disk", d.ID.String(), "name", d.Name)
			}
		}
		for _, v := range s.List(fake.ResourceServer, zone) {
			srv, ok := v.(*iaas.Server)
			if !ok {
				continue
			}
			// The fake stores a new server and then its NICs, one write
			// each: killed in between, the server names a NIC that
			// never was, and deleting it fails with that NIC's 404.
			nics := slices.DeleteFunc(slices.Clone(srv.Interfaces), func(nic *iaas.InterfaceView) bool {
				return s.Get(fake.ResourceInterface, zone, nic.ID) == nil
			})
			changed := len(nics) != len(srv.Interfaces)
			srv.Interfaces = nics
			if srv.InstanceStatus == types.ServerInstanceStatuses.Cleaning {
				srv.InstanceStatus, changed = types.ServerInstanceStatuses.Down, true
			}
			if changed {
				s.Put(fake.ResourceServer, zone, srv.ID, srv)
				s.log.Info("sacloud fake: server left half-changed by a stopped process settled", "server", srv.ID.String(), "name", srv.Name)
			}
		}
	}
}

func (s *fileStore) NeedInitData() bool { return true }

// Get and List wait for a write in progress to be committed, so that what a
// reader sees is in the store's file: a process killed right after it read
// a resource (as shoal after a create's first step) leaves it behind.
// While seeding, they see what was seeded too.
func (s *fileStore) Get(resourceKey, zone string, id types.ID) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.seed[resourceKey+"/"+zone][id.String()]; ok {
		return v
	}
	return s.JSONFileStore.Get(resourceKey, zone, id)
}

func (s *fileStore) List(resourceKey, zone string) []any {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.JSONFileStore.List(resourceKey, zone)
	seeded := s.seed[resourceKey+"/"+zone]
	if len(seeded) == 0 {
		return list
	}
	list = slices.DeleteFunc(list, func(v any) bool {
		r, ok := v.(interface{ GetID() types.ID })
		return ok && seeded[r.GetID().String()] != nil
	})
	return append(list, slices.Collect(maps.Values(seeded))...)
}

func (s *fileStore) Put(resourceKey, zone string, id types.ID, value any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seed != nil {
		k := resourceKey + "/" + zone
		if s.seed[k] == nil {
			s.seed[k] = map[string]any{}
		}
		s.seed[k][id.String()] = value
		return
	}
	s.JSONFileStore.Put(resourceKey, zone, id, value)
	s.commit()
}

func (s *fileStore) Delete(resourceKey, zone string, id types.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.seed[resourceKey+"/"+zone], id.String())
	s.JSONFileStore.Delete(resourceKey, zone, id)
	s.commit()
}

// commit renames the SDK's write over the store; s.mu is held.
func (s *fileStore) commit() {
	if err := os.Rename(s.path+".tmp", s.path); err != nil {
		// The fake's API has no way to fail a write; the next one
		// tries again.
		s.log.Warn("sacloud fake: store not written", "path", s.path, "err", err)
	}
}

// credentials reads the API keys; errors name where they were looked for,
// never a value.
func credentials(cfg Config) (token, secret string, err error) {
	if cfg.CredentialsFile != "" {
		return ReadCredentials(cfg.CredentialsFile)
	}
	token, secret = os.Getenv(iaas.APIAccessTokenEnvKey), os.Getenv(iaas.APIAccessSecretEnvKey)
	if token == "" || secret == "" {
		return "", "", fmt.Errorf("sacloud: no API keys: set %s and %s, or credentials_file", iaas.APIAccessTokenEnvKey, iaas.APIAccessSecretEnvKey)
	}
	return token, secret, nil
}

// Create creates the server, its disks and NICs, and boots it. It returns
// once the boot is accepted (the server Pending); on failure it removes
// what it created, and what it cannot remove carries the marker tags, for
// the provider's stray sweep.
func (d *Driver) Create(ctx context.Context, req cloud.CreateRequest) (cloud.Server, error) {
	tmpl := d.cfg.Template
	plan := d.cfg.PlanFor(req.Plan)
	tags := serverTags(tmpl.Tags, req.Tags)
	if err := checkTags(tags); err != nil {
		return cloud.Server{}, fmt.Errorf("sacloud: create server %s: %w", req.Name, err)
	}
	// What the template names is looked up before anything is created:
	// a plan or an archive the zone lacks fails the create with nothing
	// to clean up.
	if err := d.checkPlan(ctx, req.Plan, plan); err != nil {
		return cloud.Server{}, err
	}
	archives, err := d.resolveArchives(ctx)
	if err != nil {
		return cloud.Server{}, err
	}

	switches, err := d.resolveSwitches(ctx)
	if err != nil {
		return cloud.Server{}, err
	}
	nicIPs := make([]string, len(tmpl.NetworkInterfaces))
	var cs []*iaas.ConnectedSwitch
	for i, nic := range tmpl.NetworkInterfaces {
		if nic.Shared {
			cs = append(cs, &iaas.ConnectedSwitch{Scope: types.Scopes.Shared})
			continue
		}
		cs = append(cs, &iaas.ConnectedSwitch{ID: switches[i]})
		if nic.AssignCIDRBlock != "" {
			if nicIPs[i], err = AssignedIP(nic.AssignCIDRBlock, req.Index); err != nil {
				return cloud.Server{}, err
			}
		}
	}
	commitment := types.Commitments.Standard
	if plan.DedicatedCPU {
		commitment = types.Commitments.DedicatedCPU
	}
	srv, err := d.servers.Create(ctx, d.zone, &iaas.ServerCreateRequest{
		CPU:               plan.Core,
		MemoryMB:          plan.Memory * 1024,
		Commitment:        commitment,
		Generation:        types.PlanGenerations.Default,
		ConnectedSwitches: cs,
		InterfaceDriver:   types.InterfaceDriverMap[tmpl.InterfaceDriver],
		Name:              req.Name,
		Description:       tmpl.Description,
		Tags:              tags,
	})
	if err != nil {
		return cloud.Server{}, apiError("create server "+req.Name, err)
	}
	if err := d.finish(ctx, req, srv, tags, nicIPs, archives); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if derr := d.Delete(cctx, srv.ID.String()); derr != nil {
			d.log.Warn("sacloud: half-created server left for the stray sweep", "server", srv.ID.String(), "name", req.Name, "err", derr)
		}
		return cloud.Server{}, err
	}
	s := toServer(srv)
	s.Phase, s.State = cloud.Pending, "booting"
	if s.IP == "" && len(nicIPs) > 0 {
		s.IP = nicIPs[0]
	}
	return s, nil
}

// Preflight checks zone against the API's list of zones, and the plan of
// every group plan (template.plan, server_plans) against the zone's plans.
func (d *Driver) Preflight(ctx context.Context) (string, []string, []string) {
	where := "API " + iaas.SakuraCloudAPIRoot
	if d.cfg.APIRootURL != "" {
		where = "API " + d.cfg.APIRootURL
	}
	if d.cfg.FakeMode {
		where = "fake API"
	}
	var problems, notes []string
	zones, err := d.zones.Find(ctx, nil)
	if err != nil {
		return where, []string{apiError("list zones", err).Error()}, nil
	}
	var names []string
	for _, z := range zones.Zones {
		names = append(names, z.Name)
	}
	slices.Sort(names)
	if !slices.Contains(names, d.zone) {
		return where, []string{fmt.Sprintf("sacloud: zone %s is not in the API's list of zones (%s): check zone", d.zone, strings.Join(names, ", "))}, nil
	}
	notes = append(notes, "zone "+d.zone+" listed by the API")
	plans := map[string]Plan{"": d.cfg.Template.Plan}
	for name, pl := range d.cfg.ServerPlans {
		plans[name] = pl
	}
	for _, name := range slices.Sorted(maps.Keys(plans)) {
		if err := d.checkPlan(ctx, name, plans[name]); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		notes = append(notes, fmt.Sprintf("plan %d cores / %d GB sold in %s", plans[name].Core, plans[name].Memory, d.zone))
	}
	return where, problems, notes
}

// checkPlan makes sure the zone sells plan (the server size of the group's
// plan name), as the autoscaler does before it creates a server: a size
// the cloud does not sell would otherwise be created or refused late, with
// the API's words. The answer is kept once found.
func (d *Driver) checkPlan(ctx context.Context, name string, plan Plan) error {
	d.mu.Lock()
	sold := d.plansSold[plan]
	d.mu.Unlock()
	if sold {
		return nil
	}
	field := "template.plan"
	if _, ok := d.cfg.ServerPlans[name]; ok && name != "" {
		field = "server_plans." + name
	}
	commitment := types.Commitments.Standard
	if plan.DedicatedCPU {
		commitment = types.Commitments.DedicatedCPU
	}
	f := &exactPlans{api: d.plans, core: plan.Core, memoryMB: plan.Memory * 1024, commitment: commitment, fake: d.cfg.FakeMode}
	_, err := query.FindServerPlan(ctx, f, d.zone, &query.FindServerPlanRequest{CPU: plan.Core, MemoryGB: plan.Memory, Commitment: commitment})
	switch {
	case f.err != nil:
		return apiError("find server plan", f.err)
	case err != nil:
		kind := "standard"
		if plan.DedicatedCPU {
			kind = "dedicated-CPU"
		}
		return fmt.Errorf("sacloud: %s: zone %s sells no %s plan of %d cores and %d GB memory; plans of %d cores there: %s",
			field, d.zone, kind, plan.Core, plan.Memory, plan.Core, f.sizes())
	}
	d.mu.Lock()
	d.plansSold[plan] = true
	d.mu.Unlock()
	return nil
}

// exactPlans is the finder query.FindServerPlan is given: the API's plans
// of exactly the asked size and commitment, available. (The API's search
// filters the same already; the SDK's fake does not, and a near match
// would be the wrong size.)
type exactPlans struct {
	api        iaas.ServerPlanAPI
	core       int
	memoryMB   int
	commitment types.ECommitment
	// fake: the SDK's fake (v1.29.3) seeds its small plans with the
	// memory in GB where the API has MB ("1Core-1GB" has MemoryMB 1).
	fake bool
	err  error
	// seen are the sizes (memory in GB) of the plans of core cores the
	// API listed, for the error message.
	seen []int
}

func (e *exactPlans) Find(ctx context.Context, zone string, cond *iaas.FindCondition) (*iaas.ServerPlanFindResult, error) {
	// Asked by cores only, so that the message can list the sizes there
	// are.
	wide := *cond
	wide.Filter = maps.Clone(cond.Filter)
	delete(wide.Filter, search.Key("MemoryMB"))
	res, err := e.api.Find(ctx, zone, &wide)
	if err != nil {
		e.err = err
		return nil, err
	}
	out := &iaas.ServerPlanFindResult{}
	for _, p := range res.ServerPlans {
		if p.CPU != e.core || p.Commitment != e.commitment || p.GPU != 0 || !p.Availability.IsAvailable() {
			continue
		}
		mb := p.MemoryMB
		if e.fake && mb < 1024 {
			mb *= 1024
		}
		e.seen = append(e.seen, mb/1024)
		if mb == e.memoryMB {
			out.ServerPlans = append(out.ServerPlans, p)
		}
	}
	out.Count, out.Total = len(out.ServerPlans), len(out.ServerPlans)
	return out, nil
}

// sizes lists the memory sizes seen, "none" without any.
func (e *exactPlans) sizes() string {
	slices.Sort(e.seen)
	var s []string
	for _, m := range slices.Compact(e.seen) {
		s = append(s, strconv.Itoa(m)+" GB")
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// finish sets the NICs' addresses, creates the disks, waits for them and
// boots the server.
func (d *Driver) finish(ctx context.Context, req cloud.CreateRequest, srv *iaas.Server, tags types.Tags, nicIPs []string, archives map[int]types.ID) error {
	for i, ip := range nicIPs {
		if ip == "" || i >= len(srv.Interfaces) {
			continue
		}
		if _, err := d.ifaces.Update(ctx, d.zone, srv.Interfaces[i].ID, &iaas.InterfaceUpdateRequest{UserIPAddress: ip}); err != nil {
			return apiError("set address of "+req.Name, err)
		}
	}
	d.setCreating(req.Name, 1)
	defer d.setCreating(req.Name, -1)
	var notes []types.ID
	defer func() {
		// The startup scripts are applied once the disk is ready; the
		// notes that carried them are the server's alone.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		for _, id := range notes {
			if err := d.notes.Delete(cctx, id); err != nil && !iaas.IsNotFoundError(err) {
				d.log.Warn("sacloud: startup script note not deleted", "note", id.String(), "err", apiError("delete note", err))
			}
		}
	}()
	var diskIDs []types.ID
	for i, dt := range d.cfg.Template.Disks {
		create := &iaas.DiskCreateRequest{
			DiskPlanID:      types.DiskPlanIDMap[dt.Plan],
			Connection:      types.DiskConnectionMap[dt.Connection],
			SourceArchiveID: archives[i],
			ServerID:        srv.ID,
			SizeMB:          dt.Size * 1024,
			Name:            fmt.Sprintf("%s-disk%03d", req.Name, i+1),
			Tags:            tags,
		}
		var (
			disk *iaas.Disk
			err  error
		)
		if e := d.cfg.Template.EditParameter; i == 0 && e != nil && !e.Disabled {
			edit, ids, err := d.editRequest(ctx, req, e, nicIPs)
			notes = append(notes, ids...)
			if err != nil {
				return err
			}
			disk, err = d.disks.CreateWithConfig(ctx, d.zone, create, edit, false, nil, types.ID(0))
			if err != nil {
				return apiError(fmt.Sprintf("create disk %d of %s", i+1, req.Name), err)
			}
		} else if disk, err = d.disks.Create(ctx, d.zone, create, nil, types.ID(0)); err != nil {
			return apiError(fmt.Sprintf("create disk %d of %s", i+1, req.Name), err)
		}
		diskIDs = append(diskIDs, disk.ID)
	}
	for i, id := range diskIDs {
		w := iaas.WaiterForReady(func() (any, error) { return d.disks.Read(ctx, d.zone, id) })
		if _, err := w.WaitForState(ctx); err != nil {
			return apiError(fmt.Sprintf("copy disk %d of %s", i+1, req.Name), err)
		}
	}
	if err := d.servers.Boot(ctx, d.zone, srv.ID); err != nil {
		return apiError("boot "+req.Name, err)
	}
	return nil
}

// editRequest is the boot disk's edit: the host name is the server's, the
// startup scripts are rendered for it and passed as notes, which it
// returns for deletion.
func (d *Driver) editRequest(ctx context.Context, req cloud.CreateRequest, e *Edit, nicIPs []string) (*iaas.DiskEditRequest, []types.ID, error) {
	edit := &iaas.DiskEditRequest{
		HostName:            req.Name,
		Password:            e.Password,
		DisablePWAuth:       e.DisablePasswordAuth,
		EnableDHCP:          e.EnableDHCP,
		ChangePartitionUUID: e.ChangePartitionUUID,
	}
	for _, k := range e.SSHKeys {
		edit.SSHKeys = append(edit.SSHKeys, &iaas.DiskEditSSHKey{PublicKey: k})
	}
	if nics := d.cfg.Template.NetworkInterfaces; len(nics) > 0 && nicIPs[0] != "" {
		edit.UserIPAddress = nicIPs[0]
		mask := nics[0].AssignNetmaskLen
		if mask == 0 {
			_, n, _ := net.ParseCIDR(nics[0].AssignCIDRBlock)
			mask, _ = n.Mask.Size()
		}
		edit.UserSubnet = &iaas.DiskEditUserSubnet{DefaultRoute: nics[0].DefaultRoute, NetworkMaskLen: mask}
	}
	scripts, err := e.Scripts(ScriptData{Name: req.Name, Group: req.Group, Index: req.Index, Zone: d.zone})
	if err != nil {
		return nil, nil, fmt.Errorf("sacloud: startup script of %s: %w", req.Name, err)
	}
	var ids []types.ID
	for i, s := range scripts {
		note, err := d.notes.Create(ctx, &iaas.NoteCreateRequest{
			Name:    fmt.Sprintf("%s%s%d", req.Name, noteInfix, i+1),
			Class:   "shell",
			Content: s,
			Tags:    types.Tags{tagOwner + "=" + req.Tags[cloud.TagOwner]},
		})
		if err != nil {
			return nil, ids, apiError("create startup script of "+req.Name, err)
		}
		ids = append(ids, note.ID)
		edit.Notes = append(edit.Notes, &iaas.DiskEditNote{ID: note.ID})
	}
	return edit, ids, nil
}

// noteInfix joins a startup-script note's instance and number in its name
// (web-003-startup-1): what tells SweepStrays whose it is.
const noteInfix = "-startup-"

func (d *Driver) setCreating(name string, delta int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.creating[name] += delta; d.creating[name] <= 0 {
		delete(d.creating, name)
	}
}

// SweepStrays deletes the startup-script notes carrying owner's marker
// that no create in flight in this process uses: a create deletes its
// notes once the disk is edited, so those are left by a shoal killed
// mid-create (see cloud.Sweeper). Notes are global, not zoned: a note of
// another zone's create in flight in another shoal of the same owner (one
// state directory) cannot be, as one shoal runs per state directory.
func (d *Driver) SweepStrays(ctx context.Context, owner string) ([]string, error) {
	marker := tagOwner + "=" + owner
	var strays []*iaas.Note
	for from := 0; ; {
		res, err := d.notes.Find(ctx, &iaas.FindCondition{
			Count:  listPage,
			From:   from,
			Sort:   search.SortKeys{{Key: "ID"}},
			Filter: search.Filter{search.Key("Tags.Name"): search.TagsAndEqual(marker)},
		})
		if err != nil {
			return nil, apiError("list startup script notes", err)
		}
		d.mu.Lock()
		for _, n := range res.Notes {
			instance := n.Name
			if i := strings.LastIndex(n.Name, noteInfix); i >= 0 {
				instance = n.Name[:i]
			}
			if slices.Contains(n.Tags, marker) && d.creating[instance] == 0 {
				strays = append(strays, n)
			}
		}
		d.mu.Unlock()
		from += len(res.Notes)
		if len(res.Notes) < listPage || from >= res.Total {
			break
		}
	}
	var (
		swept []string
		errs  []error
	)
	for _, n := range strays {
		if err := d.notes.Delete(ctx, n.ID); err != nil && !iaas.IsNotFoundError(err) {
			errs = append(errs, apiError("delete startup script note "+n.Name, err))
			continue
		}
		swept = append(swept, fmt.Sprintf("startup script note %s (%s)", n.Name, n.ID))
	}
	return swept, errors.Join(errs...)
}

// AssignedIP is the address of the server with index (1-based, as in its
// name GROUP-NNN) in block: the block's address plus index, as
// sacloud/autoscaler assigns them.
func AssignedIP(block string, index int) (string, error) {
	ip, n, err := net.ParseCIDR(block)
	if err != nil || ip.To4() == nil {
		return "", fmt.Errorf("sacloud: assign_cidr_block %q is not an IPv4 CIDR block", block)
	}
	v := binary.BigEndian.Uint32(ip.To4()) + uint32(index)
	next := make(net.IP, 4)
	binary.BigEndian.PutUint32(next, v)
	if index < 1 || !n.Contains(next) {
		return "", fmt.Errorf("sacloud: no address for server %d in assign_cidr_block %s", index, block)
	}
	return next.String(), nil
}

// resolveSwitches returns the switch ID of each NIC that is not on the
// shared segment, looking each selector up once.
func (d *Driver) resolveSwitches(ctx context.Context) (map[int]types.ID, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, nic := range d.cfg.Template.NetworkInterfaces {
		if nic.Shared || !d.switchIDs[i].IsEmpty() {
			continue
		}
		id, err := d.selectOne(ctx, "switch", nic.Switch, func(c *iaas.FindCondition) ([]types.ID, error) {
			res, err := d.switches.Find(ctx, d.zone, c)
			if err != nil {
				return nil, err
			}
			var ids []types.ID
			for _, s := range res.Switches {
				ids = append(ids, s.ID)
			}
			return ids, nil
		})
		if err != nil {
			return nil, fmt.Errorf("template.network_interfaces[%d]: %w", i, err)
		}
		d.switchIDs[i] = id
	}
	return maps.Clone(d.switchIDs), nil
}

// resolveArchives returns the source archive of each disk that has one.
func (d *Driver) resolveArchives(ctx context.Context) (map[int]types.ID, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, disk := range d.cfg.Template.Disks {
		if !d.archiveIDs[i].IsEmpty() {
			continue
		}
		switch {
		case disk.OSType != "":
			f := &archiveFinder{api: d.archives}
			a, err := query.FindArchiveByOSType(ctx, f, d.zone, ostype.StrToOSType(disk.OSType))
			switch {
			case f.err != nil:
				return nil, fmt.Errorf("template.disks[%d]: %w", i, apiError("find archive of os_type "+disk.OSType, f.err))
			case err != nil:
				// The API answered without one: no retry changes that.
				return nil, fmt.Errorf("sacloud: template.disks[%d].os_type: zone %s has no public archive of os_type %s; choose another os_type or a source_archive", i, d.zone, disk.OSType)
			}
			d.archiveIDs[i] = a.ID
		case disk.SourceArchive != nil:
			id, err := d.selectOne(ctx, "source archive", disk.SourceArchive, func(c *iaas.FindCondition) ([]types.ID, error) {
				res, err := d.archives.Find(ctx, d.zone, c)
				if err != nil {
					return nil, err
				}
				var ids []types.ID
				for _, a := range res.Archives {
					ids = append(ids, a.ID)
				}
				return ids, nil
			})
			if err != nil {
				return nil, fmt.Errorf("template.disks[%d]: %w", i, err)
			}
			d.archiveIDs[i] = id
		}
	}
	return maps.Clone(d.archiveIDs), nil
}

// archiveFinder keeps the error of the API's answer, which tells a failed
// call from an archive the zone lacks.
type archiveFinder struct {
	api iaas.ArchiveAPI
	err error
}

func (f *archiveFinder) Find(ctx context.Context, zone string, cond *iaas.FindCondition) (*iaas.ArchiveFindResult, error) {
	res, err := f.api.Find(ctx, zone, cond)
	f.err = err
	return res, err
}

// selectOne finds the one resource sel selects.
func (d *Driver) selectOne(ctx context.Context, what string, sel *Selector, find func(*iaas.FindCondition) ([]types.ID, error)) (types.ID, error) {
	if sel.ID != "" {
		return types.StringID(sel.ID), nil
	}
	filter := search.Filter{}
	if len(sel.Names) > 0 {
		filter[search.Key("Name")] = search.PartialMatch(sel.Names...)
	}
	if len(sel.Tags) > 0 {
		filter[search.Key("Tags.Name")] = search.TagsAndEqual(sel.Tags...)
	}
	ids, err := find(&iaas.FindCondition{Filter: filter, Count: 2})
	switch {
	case err != nil:
		return 0, apiError("find "+what, err)
	case len(ids) == 0:
		return 0, fmt.Errorf("sacloud: no %s in zone %s with names %q and tags %q", what, d.zone, sel.Names, sel.Tags)
	case len(ids) > 1:
		return 0, fmt.Errorf("sacloud: several %ss in zone %s with names %q and tags %q; select one by id", what, d.zone, sel.Names, sel.Tags)
	}
	return ids[0], nil
}

// Delete shuts the server down (forcibly with shutdown_force), waits until
// it is down and deletes it with its disks. A server already gone is not
// an error.
func (d *Driver) Delete(ctx context.Context, id string) error {
	sid := types.StringID(id)
	if sid.IsEmpty() {
		return fmt.Errorf("sacloud: %q is not a server ID", id)
	}
	// A server whose boot was accepted but has not begun reads down, and
	// is up by the time it is deleted (409): it is shut down then, a few
	// times at most.
	for attempt := 1; ; attempt++ {
		err := d.deleteOnce(ctx, sid)
		var ae iaas.APIError
		if attempt < 3 && errors.As(err, &ae) && ae.ResponseCode() == http.StatusConflict && ctx.Err() == nil {
			d.log.Info("sacloud: server came up while being deleted; shutting it down first", "server", id, "err", err)
			continue
		}
		var de *deleteError
		if errors.As(err, &de) {
			return apiError(de.what, de.err)
		}
		return err
	}
}

// deleteError is a step of deleteOnce that failed, with the API's error
// unwrapped for Delete to judge.
type deleteError struct {
	what string
	err  error
}

func (e *deleteError) Error() string { return e.what + ": " + e.err.Error() }
func (e *deleteError) Unwrap() error { return e.err }

// deleteOnce is one pass of Delete; its errors are *deleteError.
func (d *Driver) deleteOnce(ctx context.Context, sid types.ID) error {
	id := sid.String()
	srv, err := d.servers.Read(ctx, d.zone, sid)
	if iaas.IsNotFoundError(err) {
		return nil
	}
	if err != nil {
		return &deleteError{"read server " + id, err}
	}
	switch srv.InstanceStatus {
	case types.ServerInstanceStatuses.Up:
		// A graceful shutdown may take minutes: the provider learns at
		// the accepted request that the server will not serve again.
		d.log.Info("sacloud: shutting down server", "server", srv.Name, "id", id, "shutdown", d.ShutdownMode())
		if err := power.ShutdownServer(ctx, acceptingShutdown{d.servers}, d.zone, sid, d.cfg.ShutdownForce); err != nil {
			return &deleteError{"shut down " + srv.Name + " (shutdown: " + d.ShutdownMode() + ")", err}
		}
	case types.ServerInstanceStatuses.Cleaning:
		cloud.Accepted(ctx) // shutting down already
		w := iaas.WaiterForDown(func() (any, error) { return d.servers.Read(ctx, d.zone, sid) })
		if _, err := w.WaitForState(ctx); err != nil {
			return &deleteError{"wait for " + srv.Name + " to shut down", err}
		}
	}
	var disks []types.ID
	for _, disk := range srv.Disks {
		if disk.Availability.IsMigrating() {
			// A disk still being copied (shoal stopped mid-create)
			// cannot be deleted yet.
			gone, err := d.waitCopied(ctx, disk.ID)
			if err != nil {
				return &deleteError{"wait for the disks of " + srv.Name + " to be copied", err}
			}
			if gone {
				continue // its copy failed and the cloud removed it
			}
		}
		disks = append(disks, disk.ID)
	}
	err = d.servers.DeleteWithDisks(ctx, d.zone, sid, &iaas.ServerDeleteWithDisksRequest{IDs: disks})
	if iaas.IsNotFoundError(err) {
		// Gone meanwhile, or a 404 about one of its parts (a NIC, a
		// disk): only the server's own absence means it is deleted.
		if _, rerr := d.servers.Read(ctx, d.zone, sid); !iaas.IsNotFoundError(rerr) {
			return &deleteError{"delete " + srv.Name, err}
		}
		return nil
	}
	if err != nil {
		return &deleteError{"delete " + srv.Name, err}
	}
	return nil
}

// waitCopied waits until a disk being copied is available, or reports it
// gone: a disk whose copy failed is removed by the cloud, and a waiter
// would read its 404 until the deadline.
func (d *Driver) waitCopied(ctx context.Context, id types.ID) (gone bool, err error) {
	for {
		disk, err := d.disks.Read(ctx, d.zone, id)
		switch {
		case iaas.IsNotFoundError(err):
			return true, nil
		case err == nil && !disk.Availability.IsMigrating():
			return false, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return false, fmt.Errorf("disk %s: %w", id, err)
		case <-time.After(copyPoll):
		}
	}
}

// copyPoll is how often waitCopied reads a disk being copied.
const copyPoll = time.Second

// acceptingShutdown is the server API as power.ShutdownServer calls it:
// an accepted shutdown request is reported to the provider (cloud.Accepted;
// ctx is the Delete's) before the wait for the server to go down.
type acceptingShutdown struct{ iaas.ServerAPI }

func (a acceptingShutdown) Shutdown(ctx context.Context, zone string, id types.ID, opt *iaas.ShutdownOption) error {
	err := a.ServerAPI.Shutdown(ctx, zone, id, opt)
	if err == nil {
		cloud.Accepted(ctx)
	}
	return err
}

// List returns the zone's servers with owner's marker, a page of listPage
// per call.
func (d *Driver) List(ctx context.Context, owner string) ([]cloud.Server, error) {
	var out []cloud.Server
	for from := 0; ; {
		res, err := d.servers.Find(ctx, d.zone, &iaas.FindCondition{
			Count:  listPage,
			From:   from,
			Sort:   search.SortKeys{{Key: "ID"}},
			Filter: search.Filter{search.Key("Tags.Name"): search.TagsAndEqual(tagOwner + "=" + owner)},
		})
		if err != nil {
			return nil, apiError("list servers", err)
		}
		for _, srv := range res.Servers {
			s := toServer(srv)
			d.mu.Lock()
			if s.Phase == cloud.Pending && srv.InstanceStatus.IsDown() && d.poweredOff[s.ID] && s.Tags[cloud.TagPool] != "" {
				s.Phase = cloud.Stopped
			}
			d.mu.Unlock()
			// The API's tag search is what filters; this keeps a
			// broader match (a prefix) out all the same.
			if s.Tags[cloud.TagOwner] == owner {
				out = append(out, s)
			}
		}
		from += len(res.Servers)
		if len(res.Servers) < listPage || from >= res.Total {
			return out, nil
		}
	}
}

// Sacloud tags are plain strings of at most maxTagLen characters, too short
// for "shoal-owner=ID" with shoal's owner IDs (22 characters) or for an
// instance's name. So the owner marker takes a short key, the group marker
// one too when it fits, and the instance marker is the server's name (its
// instance's name, as the autoscaler names servers).
const (
	tagOwner = "shoal-o"
	tagGroup = "shoal-g"
)

// serverTags are the template's tags and the markers, sorted.
func serverTags(own []string, markers map[string]string) types.Tags {
	tags := slices.Clone(own)
	tags = append(tags, tagOwner+"="+markers[cloud.TagOwner])
	if g := tagGroup + "=" + markers[cloud.TagGroup]; len(g) <= maxTagLen {
		tags = append(tags, g)
	}
	// A warm pool group's servers: the pool's marker and template. One
	// too long for a tag goes without, and is swept after a restart
	// rather than adopted into the pool.
	for _, k := range []string{cloud.TagPool, cloud.TagTemplate} {
		if v, ok := markers[k]; ok && len(k)+1+len(v) <= maxTagLen {
			tags = append(tags, k+"="+v)
		}
	}
	slices.Sort(tags)
	return tags
}

// tagsOf returns a server's tags, its markers as the provider knows them.
func tagsOf(srv *iaas.Server) map[string]string {
	m := map[string]string{cloud.TagInstance: srv.Name}
	for _, t := range srv.Tags {
		k, v, _ := strings.Cut(t, "=")
		switch k {
		case tagOwner:
			m[cloud.TagOwner] = v
		case tagGroup:
			m[cloud.TagGroup] = v
		default:
			m[k] = v
		}
	}
	if _, ok := m[cloud.TagGroup]; !ok {
		// A group name too long for a tag: GROUP-NNN without -NNN.
		if i := strings.LastIndexByte(srv.Name, '-'); i > 0 {
			m[cloud.TagGroup] = srv.Name[:i]
		}
	}
	return m
}

// The API's limits on a resource's tags (sacloud/autoscaler checks the
// same before it calls).
const (
	maxTags   = 10
	maxTagLen = 32
)

// checkTags refuses tags the API would: better a clear reason than its 400.
func checkTags(tags types.Tags) error {
	if len(tags) > maxTags {
		return fmt.Errorf("%d tags (the template's and shoal's markers), over the API's limit of %d", len(tags), maxTags)
	}
	for _, t := range tags {
		if n := len([]rune(t)); n > maxTagLen {
			return fmt.Errorf("tag %q has %d characters, over the API's limit of %d", t, n, maxTagLen)
		}
	}
	return nil
}

// toServer maps a server as the API lists it.
//
//	instance status       phase
//	up                    running
//	cleaning              stopping  (shutting down)
//	down, was up before   stopped   (a server tagged shoal-pool: a warm pool's, shut down)
//	down, was up before   stopping  (stopped: shoal or an operator shut it down)
//	down, never up        pending   (created: disks copying, booting)
func toServer(srv *iaas.Server) cloud.Server {
	s := cloud.Server{
		ID:      srv.ID.String(),
		Name:    srv.Name,
		State:   string(srv.InstanceStatus),
		Tags:    tagsOf(srv),
		Created: srv.CreatedAt,
	}
	if len(srv.Interfaces) > 0 {
		s.IP = srv.Interfaces[0].UserIPAddress
		if s.IP == "" {
			s.IP = srv.Interfaces[0].IPAddress
		}
	}
	switch {
	case srv.InstanceStatus.IsUp():
		s.Phase = cloud.Running
	case srv.InstanceStatus.IsDown() && srv.InstanceBeforeStatus.IsUp() && s.Tags[cloud.TagPool] != "":
		// A warm pool's server shut down (or one of a pool group's on its
		// way to deletion, which the provider tells apart).
		s.Phase = cloud.Stopped
	case srv.InstanceStatus == types.ServerInstanceStatuses.Cleaning,
		srv.InstanceBeforeStatus.IsUp():
		s.Phase = cloud.Stopping
	default:
		s.Phase = cloud.Pending
	}
	if s.State == "" {
		s.State = "down"
	}
	return s
}

// apiError names what failed and keeps the API's code and message (never
// a request's URL or headers); throttling, brief unavailability and a lack
// of capacity wrap cloud.ErrRetryable.
func apiError(what string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("sacloud: %s: %w", what, err)
	}
	var ae iaas.APIError
	if !errors.As(err, &ae) {
		var ne net.Error
		if errors.As(err, &ne) {
			// The API could not be reached: an outage to wait out.
			return fmt.Errorf("sacloud: %s: API unreachable: %w", what, errors.Join(cloud.ErrRetryable, ne))
		}
		return fmt.Errorf("sacloud: %s: %w", what, err)
	}
	msg := fmt.Sprintf("sacloud: %s: %d %s", what, ae.ResponseCode(), ae.Message())
	if c := ae.Code(); c != "" && c != strconv.Itoa(ae.ResponseCode()) {
		msg += " (" + c + ")"
	}
	if retryable(ae) {
		return fmt.Errorf("%s: %w", msg, cloud.ErrRetryable)
	}
	return errors.New(msg)
}

func retryable(ae iaas.APIError) bool {
	switch ae.ResponseCode() {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusLocked:
		return true
	}
	text := strings.ToLower(ae.Code() + " " + ae.Message())
	return strings.Contains(text, "insufficient") || strings.Contains(text, "resource_shortage") || strings.Contains(text, "不足")
}
