package ec2_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider/cloud/ec2"
	// Registers ec2's entry type, as shoal does.
	_ "github.com/shoal-lb/shoal/internal/provider/all"
)

// testdataFile is a config file in config's testdata, whose aws/credentials
// the documents below name.
const testdataFile = "../../../config/testdata/shoal.yaml"

func testdataDir(t *testing.T) string {
	dir, err := filepath.Abs(filepath.Dir(testdataFile))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// ec2Doc is a config with one ec2 provider; tests replace its markers to
// break one thing at a time. Paths are relative to config's testdata.
var ec2Doc = readDoc("../../../config/testdata/providers-ec2.yaml")

func TestParseEC2(t *testing.T) {
	cfg, err := config.Parse(testdataFile, []byte(ec2Doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	p := cfg.Providers[0]
	e := ec2.Of(p)
	if p.Type != ec2.Type || e == nil {
		t.Fatalf("provider = %+v, want one ec2 provider", p)
	}
	want := ec2.Config{
		Region: "ap-northeast-1", CredentialsFile: filepath.Join(testdataDir(t), "aws/credentials"), Profile: "shoal",
		LaunchTemplate: &ec2.LaunchTemplate{Name: "web-lt", Version: "3"},
		Subnet:         "subnet-0123456789abcdef0", SecurityGroups: []string{"sg-0123456789abcdef0"},
		Market: ec2.Spot, SpotMaxPrice: "0.05", Address: ec2.AddressPrivate, Tags: map[string]string{"team": "web"},
	}
	if got := *e; !equalEC2(got, want) {
		t.Errorf("ec2 = %+v\nwant %+v", got, want)
	}
	// A plan picks its instance type; one not listed (or none) takes
	// instance_type, here the launch template's ("").
	// A list is the plan's fallbacks, in order.
	for plan, want := range map[string]string{"medium": "t3.small", "largest": "c7g.xlarge,c6g.xlarge", "smallest": "", "": ""} {
		if got := strings.Join(e.InstanceTypesFor(plan), ","); got != want {
			t.Errorf("InstanceTypesFor(%q) = %q, want %q", plan, got, want)
		}
	}
	e.InstanceType = "t3.micro"
	if got := strings.Join(e.InstanceTypesFor("smallest"), ","); got != "t3.micro" {
		t.Errorf("InstanceTypesFor(smallest) with instance_type t3.micro = %q", got)
	}
	const file = "../../../config/testdata/shoal.yaml"
	for _, c := range []struct{ to, want string }{
		{"largest: []}", file + `:15:49: providers[0].instance_types.largest: must name at least one instance type`},
		{"largest: [c7g.xlarge, c7g.xlarge]}", file + `:15:62: providers[0].instance_types.largest[1]: c7g.xlarge is listed twice for plan largest`},
		{"largest: [c7g.xlarge, C7]}", file + `:15:62: providers[0].instance_types.largest[1]: must be an instance type such as t3.micro, got "C7"`},
	} {
		_, err := config.Parse(testdataFile, []byte(strings.Replace(ec2Doc, "largest: [c7g.xlarge, c6g.xlarge]}", c.to, 1)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got: %v\nwant: %s", c.to, err, c.want)
		}
	}
}

func equalEC2(a, b ec2.Config) bool {
	return a.Region == b.Region && a.CredentialsFile == b.CredentialsFile && a.Profile == b.Profile &&
		a.Endpoint == b.Endpoint && *a.LaunchTemplate == *b.LaunchTemplate &&
		a.AMI == b.AMI && a.InstanceType == b.InstanceType && a.Subnet == b.Subnet &&
		strings.Join(a.SecurityGroups, ",") == strings.Join(b.SecurityGroups, ",") && a.Market == b.Market &&
		a.SpotMaxPrice == b.SpotMaxPrice && a.Address == b.Address && len(a.Tags) == len(b.Tags) && a.Tags["team"] == b.Tags["team"]
}

func TestParseEC2CredentialsEnv(t *testing.T) {
	doc := strings.Replace(ec2Doc, "credentials_file: aws/credentials\n    profile: shoal\n", "endpoint: http://127.0.0.1:5000\n", 1)
	t.Setenv(ec2.EnvAWSAccessKeyID, "AKIAENVEXAMPLE")
	t.Setenv(ec2.EnvAWSSecretAccessKey, "env-secret-example")
	cfg, err := config.Parse(testdataFile, []byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if e := ec2.Of(cfg.Providers[0]); e.CredentialsFile != "" || e.Endpoint != "http://127.0.0.1:5000" {
		t.Errorf("ec2 = %+v", e)
	}
	t.Setenv(ec2.EnvAWSSecretAccessKey, "")
	_, err = config.Parse(testdataFile, []byte(doc))
	if want := "../../../config/testdata/shoal.yaml:3:5: providers[0].credentials_file: AWS_SECRET_ACCESS_KEY is not set in shoal's environment; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, name a credentials_file, or use credentials: default (the SDK's default chain: instance role, SSO, web identity)"; err == nil || err.Error() != want {
		t.Errorf("Parse without a secret in the environment:\n got: %v\nwant: %s", err, want)
	}
}

// readDoc reads a config document config's own tests use too (one copy,
// in its testdata). A test binary that cannot read it has nothing to test.
func readDoc(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestParseEC2CredentialsKeys: credentials, role_arn and
// role_session_name, and each refusal at its FILE:LINE:COL.
func TestParseEC2CredentialsKeys(t *testing.T) {
	chain := strings.Replace(ec2Doc, "credentials_file: aws/credentials\n    profile: shoal\n",
		"credentials: default\n    profile: ci\n    role_arn: arn:aws:iam::123456789012:role/shoal\n    role_session_name: web\n", 1)
	cfg, err := config.Parse(testdataFile, []byte(chain))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if e := ec2.Of(cfg.Providers[0]); e.Credentials != ec2.CredsDefault || e.Profile != "ci" || e.RoleARN != "arn:aws:iam::123456789012:role/shoal" || e.RoleSessionName != "web" || e.CredentialsFile != "" {
		t.Errorf("ec2 = %+v", e)
	}
	cfg, err = config.Parse(testdataFile, []byte(ec2Doc))
	if err != nil || ec2.Of(cfg.Providers[0]).Credentials != "" {
		t.Errorf("with a credentials_file: %v, credentials %q, want it left out (file)", err, ec2.Of(cfg.Providers[0]).Credentials)
	}
	const file = "../../../config/testdata/shoal.yaml"
	for _, c := range []struct{ from, to, want string }{
		{"credentials_file: aws/credentials\n", "credentials: imds\n    credentials_file: aws/credentials\n",
			file + `:7:18: providers[0].credentials: must be env, file or default, got "imds"`},
		{"credentials_file: aws/credentials\n", "credentials: default\n    credentials_file: aws/credentials\n",
			file + `:8:23: providers[0].credentials_file: applies to credentials: file only (credentials is default)`},
		{"credentials_file: aws/credentials\n    profile: shoal\n", "credentials: file\n",
			file + `:7:18: providers[0].credentials_file: required with credentials: file: the shared credentials file whose profile holds the keys`},
		{"profile: shoal\n", "profile: shoal\n    role_arn: arn:aws:iam::12:role/x\n",
			file + `:9:15: providers[0].role_arn: must be an IAM role's ARN such as arn:aws:iam::123456789012:role/shoal, got "arn:aws:iam::12:role/x"`},
		{"profile: shoal\n", "profile: shoal\n    role_session_name: web\n",
			file + `:9:24: providers[0].role_session_name: applies to role_arn only; name the role to assume, or leave it out`},
		{"profile: shoal\n", "profile: shoal\n    role_arn: arn:aws:iam::123456789012:role/shoal\n    role_session_name: \"a b\"\n",
			file + `:10:24: providers[0].role_session_name: must be 2 to 64 of letters, digits and _ + = , . @ -, got "a b"`},
	} {
		_, err := config.Parse(testdataFile, []byte(strings.Replace(ec2Doc, c.from, c.to, 1)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got: %v\nwant: %s", c.to, err, c.want)
		}
	}
}

// TestParseEC2SubnetsUserData: subnets and user_data, and each refusal at
// its FILE:LINE:COL.
func TestParseEC2SubnetsUserData(t *testing.T) {
	doc := strings.Replace(ec2Doc, "subnet: subnet-0123456789abcdef0\n",
		"subnets: [subnet-0123456789abcdef0, subnet-0123456789abcdef1]\n    user_data: \"#!/bin/sh\\necho {{.Name}}\\n\"\n", 1)
	cfg, err := config.Parse(testdataFile, []byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if e := ec2.Of(cfg.Providers[0]); strings.Join(e.Subnets, ",") != "subnet-0123456789abcdef0,subnet-0123456789abcdef1" || e.Subnet != "" || e.UserData != "#!/bin/sh\necho {{.Name}}\n" {
		t.Errorf("ec2 = %+v", e)
	}
	const file = "../../../config/testdata/shoal.yaml"
	for _, c := range []struct{ to, want string }{
		{"subnets: [subnet-0123456789abcdef0, subnet-0123456789abcdef0]\n",
			file + `:10:41: providers[0].subnets[1]: subnet-0123456789abcdef0 is listed twice; list each subnet (one per availability zone) once`},
		{"subnets: [subnet-01]\n", file + `:10:15: providers[0].subnets[0]: must be a subnet ID such as subnet-0123456789abcdef0, got "subnet-01"`},
		{"subnet: subnet-0123456789abcdef0\n    subnets: [subnet-0123456789abcdef1]\n",
			file + `:11:15: providers[0].subnets[0]: subnet and subnets exclude each other: list the one subnet in subnets, or leave subnets out`},
		{"subnet: subnet-0123456789abcdef0\n    user_data: \"{{.Nmae}}\"\n", file + `:11:16: providers[0].user_data: `},
	} {
		_, err := config.Parse(testdataFile, []byte(strings.Replace(ec2Doc, "subnet: subnet-0123456789abcdef0\n", c.to, 1)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got: %v\nwant: %s", c.to, err, c.want)
		}
	}
}

// TestParseEC2Spot: spot's on_demand_base and fallback, and their
// refusals at FILE:LINE:COL.
func TestParseEC2Spot(t *testing.T) {
	cfg, err := config.Parse(testdataFile, []byte(strings.Replace(ec2Doc, "spot_max_price: \"0.05\"\n", "spot_max_price: \"0.05\"\n    spot: {on_demand_base: 2, fallback: false}\n", 1)))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if s := ec2.Of(cfg.Providers[0]).Spot; s.OnDemandBase != 2 || s.Fallback {
		t.Errorf("spot = %+v", s)
	}
	if s := ec2.Of(mustParse(t, ec2Doc).Providers[0]).Spot; s.OnDemandBase != 0 || !s.Fallback {
		t.Errorf("spot left out = %+v, want no base and fallback", s)
	}
	const file = "../../../config/testdata/shoal.yaml"
	for _, c := range []struct{ from, to, want string }{
		{"spot_max_price: \"0.05\"\n", "spot_max_price: \"0.05\"\n    spot: {on_demand_base: -1}\n",
			file + `:14:28: providers[0].spot.on_demand_base: must be 0 or more (the group's first instances that are on-demand), got -1`},
		{"market: spot\n    spot_max_price: \"0.05\"\n", "spot: {on_demand_base: 1}\n",
			file + `:12:11: providers[0].spot: applies to spot instances only; set market: spot, or leave it out`},
	} {
		_, err := config.Parse(testdataFile, []byte(strings.Replace(ec2Doc, c.from, c.to, 1)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got: %v\nwant: %s", c.to, err, c.want)
		}
	}
}

func mustParse(t *testing.T, doc string) *config.Config {
	t.Helper()
	cfg, err := config.Parse(testdataFile, []byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}
