package ec2

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/template"
)

// Type is the type name of ec2 entries of providers: instances run as EC2
// instances.
const Type = "ec2"

// ProviderType is ec2's entry type (registered by provider/all).
var ProviderType = config.ProviderType{
	Name: Type, Cloud: true, Keys: []any{keyDefaults()}, Required: []string{"port"},
	Source: "the provider's launch_template or ami",
	Decode: decode,
	// Stopped with StopInstances, started again with StartInstances.
	WarmStates: func(*config.Provider) ([]string, string) { return config.WarmStates, "" },
	Plans: func(p *config.Provider) (string, []string) {
		return "instance_types", slices.Sorted(maps.Keys(Of(*p).InstanceTypes))
	},
}

// Of returns the ec2 keys of entry p (nil when p is not an ec2 entry).
func Of(p config.Provider) *Config {
	c, _ := p.Spec.(*Config)
	return c
}

// keyDefaults are the keys with their defaults, launch_template there
// (for the reference).
func keyDefaults() Config {
	e := Defaults
	lt := defaultLaunchTemplate
	e.LaunchTemplate = &lt
	return e
}

// Config is the rest of a provider entry of type ec2: where its
// instances run and what they are made from. An instance comes from a
// launch template (whose settings ami, instance_type, subnet and
// security_groups then override), or from ami and instance_type.
type Config struct {
	Region string `yaml:"region" required:"true"`
	// Credentials is where the keys come from: env (CredsEnv: only
	// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN),
	// file (CredsFile: CredentialsFile's Profile, nothing else), or
	// default (CredsDefault: the SDK's default chain: the environment,
	// ~/.aws/config's Profile with SSO or credential_process, web
	// identity, the instance role through IMDS). Left out, it is file
	// with a credentials_file and env without.
	Credentials string `yaml:"credentials"`
	// CredentialsFile is a shared credentials file (the INI file of
	// ~/.aws/credentials) whose Profile holds the keys.
	CredentialsFile string `yaml:"credentials_file"`
	// Profile is the profile of CredentialsFile, or with credentials:
	// default the profile of ~/.aws/config the chain starts from.
	Profile string `yaml:"profile"`
	// RoleARN is a role assumed (STS AssumeRole) with the keys the
	// credentials give, as RoleSessionName; its short-lived keys are
	// renewed before they expire.
	RoleARN         string `yaml:"role_arn"`
	RoleSessionName string `yaml:"role_session_name"`
	// Endpoint replaces the EC2 API's address; it is meant for emulators
	// (moto) only.
	Endpoint       string          `yaml:"endpoint"`
	LaunchTemplate *LaunchTemplate `yaml:"launch_template"`
	AMI            string          `yaml:"ami"`
	InstanceType   string          `yaml:"instance_type"`
	// InstanceTypes maps the group's plan names (its plans' names) to an
	// instance type, or to a list of them tried in order when EC2 has no
	// capacity for one (InsufficientInstanceCapacity); a plan not listed,
	// or no plan, takes InstanceType (or the launch template's).
	InstanceTypes map[string][]string `yaml:"instance_types"`
	Subnet        string              `yaml:"subnet"`
	// Subnets are several subnets, one per availability zone: each new
	// instance goes to the one with the fewest of its group's, and a
	// scale-in takes from the zone with the most (instead of subnet).
	Subnets []string `yaml:"subnets"`
	// UserData is the instances' user data, a template of the instance's
	// fields ({{.Name}}, {{.Group}}, {{.Index}}, {{.Plan}}, {{.Subnet}},
	// {{.Owner}}, {{.Port}}), sent base64-encoded as EC2 wants.
	UserData       string   `yaml:"user_data"`
	SecurityGroups []string `yaml:"security_groups"`
	KeyName        string   `yaml:"key_name"`
	// IAMInstanceProfile is an instance profile's name or ARN.
	IAMInstanceProfile string `yaml:"iam_instance_profile"`
	// Market is on-demand (OnDemand) or spot (Spot); SpotMaxPrice (USD an hour, "" for
	// the on-demand price) caps a spot instance's price.
	Market       string `yaml:"market"`
	SpotMaxPrice string `yaml:"spot_max_price"`
	// Spot is how a spot market mixes in on-demand instances.
	Spot SpotOptions `yaml:"spot"`
	// Address is which of an instance's addresses it serves on:
	// private (AddressPrivate) or public (AddressPublic).
	Address string `yaml:"address"`
	// Tags are put on every instance besides its Name and shoal's markers.
	Tags map[string]string `yaml:"tags"`
}

// SpotOptions mix on-demand instances into a group on the spot market:
// its first OnDemandBase live instances are on-demand, the rest spot; and
// with Fallback a spot request EC2 refuses for capacity, price or the
// account's spot limit is made on-demand instead of retried.
type SpotOptions struct {
	OnDemandBase int  `yaml:"on_demand_base"`
	Fallback     bool `yaml:"fallback"`
}

// LaunchTemplate names a launch template by ID or by name, and its
// version: a number, $Latest or $Default.
type LaunchTemplate struct {
	ID      string `yaml:"id"`
	Name    string `yaml:"name"`
	Version string `yaml:"version"`
}

// Values of Config.Credentials, Config.Market and Config.Address.
const (
	CredsEnv       = "env"
	CredsFile      = "file"
	CredsDefault   = "default"
	OnDemand       = "on-demand"
	Spot           = "spot"
	AddressPrivate = "private"
	AddressPublic  = "public"
)

// Defaults holds the defaults of an ec2 provider's keys.
var Defaults = Config{Profile: "default", RoleSessionName: "shoal", Market: OnDemand, Address: AddressPrivate, Spot: SpotOptions{Fallback: true}}

// defaultLaunchTemplate holds the defaults of a launch template's keys.
var defaultLaunchTemplate = LaunchTemplate{Version: "$Default"}

// Environment variables the keys come from without a credentials file.
const (
	EnvAWSAccessKeyID     = "AWS_ACCESS_KEY_ID"
	EnvAWSSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	EnvAWSSessionToken    = "AWS_SESSION_TOKEN"
)

var (
	regionRE       = regexp.MustCompile(`^[a-z]{2}(-[a-z0-9]+)+$`)
	amiRE          = regexp.MustCompile(`^ami-[0-9a-f]{8,17}$`)
	subnetRE       = regexp.MustCompile(`^subnet-[0-9a-f]{8,17}$`)
	securityRE     = regexp.MustCompile(`^sg-[0-9a-f]{8,17}$`)
	templateIDRE   = regexp.MustCompile(`^lt-[0-9a-f]{8,17}$`)
	templateNameRE = regexp.MustCompile(`^[A-Za-z0-9()./_-]{3,128}$`)
	// instanceTypeRE is family.size (t3.micro, m7g.metal-48xl).
	instanceTypeRE = regexp.MustCompile(`^[a-z][a-z0-9-]*\.[a-z0-9-]+$`)
	tagKeyRE       = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]{1,128}$`)
	spotPriceRE    = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)
	roleARNRE      = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]{1,512}$`)
	sessionNameRE  = regexp.MustCompile(`^[\w+=,.@-]{2,64}$`)
)

// decode decodes the keys of a provider of type ec2.
func decode(pe *config.ProviderEntry, p *config.Provider) {
	f := pe
	e := Defaults
	if r, n := f.String("region", ""); n != nil {
		if !regionRE.MatchString(r) {
			f.Errorf(n, f.Field("region"), "must be an AWS region such as ap-northeast-1, got %q", r)
		}
		e.Region = r
	}
	decodeCredentials(f, &e)
	if ep, n := f.String("endpoint", ""); n != nil {
		if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			f.Errorf(n, f.Field("endpoint"), "must be an http:// or https:// URL without credentials, got %q", ep)
		}
		e.Endpoint = ep
	}
	if n := f.Node("launch_template"); n != nil {
		e.LaunchTemplate = decodeLaunchTemplate(f, n, f.Field("launch_template"))
	}
	e.AMI = match(f, "ami", amiRE, "an AMI ID such as ami-0123456789abcdef0")
	e.InstanceType = match(f, "instance_type", instanceTypeRE, "an instance type such as t3.micro")
	if n := f.Node("instance_types"); n != nil {
		entries, _ := f.Entries(n, f.Field("instance_types"))
		e.InstanceTypes = make(map[string][]string, len(entries))
		for _, it := range entries {
			field := config.Join(f.Field("instance_types"), it.Key)
			nodes := []*yaml.Node{it.V}
			if it.V.Kind == yaml.SequenceNode {
				if nodes = it.V.Content; len(nodes) == 0 {
					f.Errorf(it.V, field, "must name at least one instance type")
				}
			}
			for i, vn := range nodes {
				vf := field
				if it.V.Kind == yaml.SequenceNode {
					vf = fmt.Sprintf("%s[%d]", field, i)
				}
				v, ok := f.Value(vn, vf)
				if !ok {
					continue
				}
				switch {
				case !instanceTypeRE.MatchString(v):
					f.Errorf(vn, vf, "must be an instance type such as t3.micro, got %q", v)
				case slices.Contains(e.InstanceTypes[it.Key], v):
					f.Errorf(vn, vf, "%s is listed twice for plan %s", v, it.Key)
				}
				e.InstanceTypes[it.Key] = append(e.InstanceTypes[it.Key], v)
			}
		}
	}
	if e.LaunchTemplate == nil && f.Root() != nil {
		for _, k := range []string{"ami", "instance_type"} {
			if f.Node(k) == nil {
				f.Errorf(f.Root(), f.Field(k), "required without launch_template (an instance is made from a launch template, or from an AMI and an instance type)")
			}
		}
	}
	e.Subnet = match(f, "subnet", subnetRE, "a subnet ID such as subnet-0123456789abcdef0")
	seen := map[string]bool{}
	for _, it := range f.Strings("subnets") {
		switch {
		case !subnetRE.MatchString(it.Val):
			f.Errorf(it.Node, it.Field, "must be a subnet ID such as subnet-0123456789abcdef0, got %q", it.Val)
		case seen[it.Val]:
			f.Errorf(it.Node, it.Field, "%s is listed twice; list each subnet (one per availability zone) once", it.Val)
		case e.Subnet != "":
			f.Errorf(it.Node, it.Field, "subnet and subnets exclude each other: list the one subnet in subnets, or leave subnets out")
		}
		seen[it.Val] = true
		e.Subnets = append(e.Subnets, it.Val)
	}
	if u, n := f.String("user_data", ""); n != nil {
		if _, err := CompileUserData(u); err != nil {
			f.Errorf(n, f.Field("user_data"), "%v", err)
		}
		e.UserData = u
	}
	for _, it := range f.Strings("security_groups") {
		if !securityRE.MatchString(it.Val) {
			f.Errorf(it.Node, it.Field, "must be a security group ID such as sg-0123456789abcdef0, got %q", it.Val)
		}
		e.SecurityGroups = append(e.SecurityGroups, it.Val)
	}
	e.KeyName, _ = f.String("key_name", "")
	e.IAMInstanceProfile, _ = f.String("iam_instance_profile", "")
	if m, n := f.String("market", e.Market); n != nil {
		if m != OnDemand && m != Spot {
			f.Errorf(n, f.Field("market"), "must be %s or %s, got %q", OnDemand, Spot, m)
		}
		e.Market = m
	}
	if p, n := f.String("spot_max_price", ""); n != nil {
		switch {
		case e.Market != Spot:
			f.Errorf(n, f.Field("spot_max_price"), "applies to spot instances only; set market: spot, or leave it out")
		case !spotPriceRE.MatchString(p):
			f.Errorf(n, f.Field("spot_max_price"), `must be a price in USD an hour such as "0.05", got %q`, p)
		}
		e.SpotMaxPrice = p
	}
	if n := f.Node("spot"); n != nil {
		sf := f.Section(n, f.Field("spot"), SpotOptions{})
		if e.Market != Spot {
			f.Errorf(n, f.Field("spot"), "applies to spot instances only; set market: spot, or leave it out")
		}
		if b, bn := sf.Int("on_demand_base", 0); bn != nil {
			if b < 0 {
				sf.Errorf(bn, sf.Field("on_demand_base"), "must be 0 or more (the group's first instances that are on-demand), got %d", b)
			}
			e.Spot.OnDemandBase = b
		}
		e.Spot.Fallback, _ = sf.Bool("fallback", e.Spot.Fallback)
	}
	if a, n := f.String("address", e.Address); n != nil {
		if a != AddressPrivate && a != AddressPublic {
			f.Errorf(n, f.Field("address"), "must be %s or %s, got %q", AddressPrivate, AddressPublic, a)
		}
		e.Address = a
	}
	if n := f.Node("tags"); n != nil {
		e.Tags = decodeTags(f, n, f.Field("tags"))
	}
	p.Spec = &e
}

// maxUserData is EC2's limit of user data, before base64.
const maxUserData = 16 << 10

// UserData is what user_data is expanded with for each instance.
type UserData struct {
	Name, Group, Plan, Subnet, Owner string
	Index, Port                      int
}

// sampleUserData is what user_data is trial-run with at load.
var sampleUserData = UserData{Name: "web-001", Group: "web", Plan: "small", Subnet: "subnet-0123456789abcdef0", Owner: "shoal-0", Index: 1, Port: 8080}

// CompileUserData compiles user_data and trial-runs it: a misspelt field,
// or a script past EC2's 16 KiB, fails when the config loads.
func CompileUserData(text string) (template.Argv, error) {
	arg, out, err := template.Compile(text, sampleUserData)
	if err != nil {
		return nil, err
	}
	if len(out) > maxUserData {
		return nil, fmt.Errorf("expands to %d bytes; EC2 takes at most %d (16 KiB) of user data", len(out), maxUserData)
	}
	return template.Argv{arg}, nil
}

// InstanceTypesFor returns the instance types of a group's plan, in the
// order they are tried: its entry in instance_types, else instance_type
// (none leaves it to the launch template).
func (e *Config) InstanceTypesFor(plan string) []string {
	if t, ok := e.InstanceTypes[plan]; ok && plan != "" {
		return t
	}
	if e.InstanceType == "" {
		return nil
	}
	return []string{e.InstanceType}
}

// ec2Match reads key, which must match re (what describes it).
func match(f *config.ProviderEntry, key string, re *regexp.Regexp, what string) string {
	v, n := f.String(key, "")
	if n != nil && !re.MatchString(v) {
		f.Errorf(n, f.Field(key), "must be %s, got %q", what, v)
	}
	return v
}

// decodeCredentials decodes where the keys come from and checks, without
// calling AWS, that what it can check is there. Messages never show a key.
func decodeCredentials(f *config.ProviderEntry, e *Config) {
	file, fn := f.String("credentials_file", "")
	profile, pn := f.String("profile", e.Profile)
	e.Profile = profile
	// mode is what credentials says, or what its absence means; the
	// config keeps "" for the latter.
	mode := CredsEnv
	if fn != nil {
		mode = CredsFile
	}
	if c, cn := f.String("credentials", ""); cn != nil {
		switch {
		case c != CredsEnv && c != CredsFile && c != CredsDefault:
			f.Errorf(cn, f.Field("credentials"), "must be %s, %s or %s, got %q", CredsEnv, CredsFile, CredsDefault, c)
		case c != CredsFile && fn != nil:
			f.Errorf(fn, f.Field("credentials_file"), "applies to credentials: %s only (credentials is %s)", CredsFile, c)
		case c == CredsFile && fn == nil:
			f.Errorf(cn, f.Field("credentials_file"), "required with credentials: %s: the shared credentials file whose profile holds the keys", CredsFile)
		}
		e.Credentials, mode = c, c
	}
	if r, n := f.String("role_arn", ""); n != nil {
		if !roleARNRE.MatchString(r) {
			f.Errorf(n, f.Field("role_arn"), "must be an IAM role's ARN such as arn:aws:iam::123456789012:role/shoal, got %q", r)
		}
		e.RoleARN = r
	}
	if r, n := f.String("role_session_name", e.RoleSessionName); n != nil {
		switch {
		case e.RoleARN == "":
			f.Errorf(n, f.Field("role_session_name"), "applies to role_arn only; name the role to assume, or leave it out")
		case !sessionNameRE.MatchString(r):
			f.Errorf(n, f.Field("role_session_name"), "must be 2 to 64 of letters, digits and _ + = , . @ -, got %q", r)
		}
		e.RoleSessionName = r
	}
	switch mode {
	case CredsEnv:
		if pn != nil {
			f.Errorf(pn, f.Field("profile"), "applies to credentials: %s or %s only; with %s the keys come from %s and %s", CredsFile, CredsDefault, CredsEnv, EnvAWSAccessKeyID, EnvAWSSecretAccessKey)
		}
		for _, v := range []string{EnvAWSAccessKeyID, EnvAWSSecretAccessKey} {
			if f.Root() != nil && os.Getenv(v) == "" {
				f.Errorf(f.Root(), f.Field("credentials_file"), "%s is not set in shoal's environment; set %s and %s, name a credentials_file, or use credentials: %s (the SDK's default chain: instance role, SSO, web identity)", v, EnvAWSAccessKeyID, EnvAWSSecretAccessKey, CredsDefault)
				break
			}
		}
	case CredsFile:
		if fn == nil {
			return
		}
		e.CredentialsFile = f.Path(file)
		if err := CheckAWSCredentialsFile(e.CredentialsFile, profile); err != nil {
			f.Errorf(fn, f.Field("credentials_file"), "%v", err)
		}
	}
}

// CheckAWSCredentialsFile makes sure the shared credentials file at path
// holds an access key and a secret for profile, reading no other file.
func CheckAWSCredentialsFile(path, profile string) error {
	if _, err := config.ReadRegular(path, config.MaxKeyFile); err != nil {
		return err
	}
	sc, err := LoadAWSProfile(context.Background(), path, profile)
	var missing awsconfig.SharedConfigProfileNotExistError
	switch {
	case errors.As(err, &missing):
		return fmt.Errorf("%s has no profile [%s]", path, profile)
	case err != nil:
		return fmt.Errorf("%s does not parse as a shared credentials file: %v", path, err)
	case !sc.Credentials.HasKeys():
		return fmt.Errorf("profile [%s] of %s has no aws_access_key_id and aws_secret_access_key (roles, SSO and credential_process are not used)", profile, path)
	}
	return nil
}

// LoadAWSProfile reads profile from the shared credentials file at path
// only: not ~/.aws/config, nor the files the environment names.
func LoadAWSProfile(ctx context.Context, path, profile string) (awsconfig.SharedConfig, error) {
	return awsconfig.LoadSharedConfigProfile(ctx, profile, func(o *awsconfig.LoadSharedConfigOptions) {
		o.CredentialsFiles = []string{path}
		o.ConfigFiles = []string{}
	})
}

func decodeLaunchTemplate(pe *config.ProviderEntry, n *yaml.Node, path string) *LaunchTemplate {
	f := pe.Section(n, path, LaunchTemplate{})
	lt := defaultLaunchTemplate
	id, in := f.String("id", "")
	name, nn := f.String("name", "")
	switch {
	case f.Root() == nil:
	case in != nil && nn != nil:
		f.Errorf(nn, f.Field("name"), "a launch template is named by id or by name, not both")
	case in == nil && nn == nil:
		f.Errorf(f.Root(), f.Field("id"), "required: the launch template's id (lt-...) or its name")
	case in != nil && !templateIDRE.MatchString(id):
		f.Errorf(in, f.Field("id"), "must be a launch template ID such as lt-0123456789abcdef0, got %q", id)
	case nn != nil && !templateNameRE.MatchString(name):
		f.Errorf(nn, f.Field("name"), "must be a launch template name (3 to 128 of A-Z a-z 0-9 ( ) . / _ -), got %q", name)
	}
	lt.ID, lt.Name = id, name
	if v, vn := f.String("version", lt.Version); vn != nil {
		if n, err := strconv.Atoi(v); v != "$Latest" && v != "$Default" && (err != nil || n < 1) {
			f.Errorf(vn, f.Field("version"), `must be a version number, "$Latest" or "$Default", got %q`, v)
		}
		lt.Version = v
	}
	return &lt
}

// ec2Tags decodes extra tags; shoal's own (the shoal- prefix, Name) are
// refused, since adoption and sweeping trust them.
func decodeTags(f *config.ProviderEntry, n *yaml.Node, path string) map[string]string {
	entries, _ := f.Entries(n, path)
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		field := config.Join(path, e.Key)
		switch {
		case !tagKeyRE.MatchString(e.Key) || strings.HasPrefix(strings.ToLower(e.Key), "aws:"):
			f.Errorf(e.K, field, "must be an EC2 tag key (1 to 128 letters, digits, spaces and _ . : / = + - @, not aws:...), got %q", e.Key)
			continue
		case strings.HasPrefix(e.Key, "shoal-") || e.Key == "Name":
			f.Errorf(e.K, field, "%s is set by shoal on every instance; choose another key", e.Key)
			continue
		}
		v, ok := f.Value(e.V, field)
		if !ok {
			continue
		}
		if len(v) > 256 {
			f.Errorf(e.V, field, "a tag value has at most 256 characters, got %d", len(v))
		}
		out[e.Key] = v
	}
	return out
}
