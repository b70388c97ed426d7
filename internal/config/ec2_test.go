package config

import (
	_ "embed"
	"path/filepath"
	"strings"
	"testing"
)

// ec2Doc is a config with one ec2 provider; tests replace its markers to
// break one thing at a time. Paths are relative to testdata.
//
//go:embed testdata/providers-ec2.yaml
var ec2Doc string

func TestParseEC2Errors(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	creds := filepath.Join(testdataDir(t), "aws/credentials")
	tests := []struct {
		name     string
		old, new string
		want     string
	}{
		{"bad region", "region: ap-northeast-1", "region: Tokyo",
			`testdata/shoal.yaml:6:13: providers[0].region: must be an AWS region such as ap-northeast-1, got "Tokyo"`},
		{"no region", "    region: ap-northeast-1\n", "",
			`testdata/shoal.yaml:3:5: providers[0].region: required`},
		{"no credentials", "    credentials_file: aws/credentials\n", "",
			"testdata/shoal.yaml:3:5: providers[0].credentials_file: AWS_ACCESS_KEY_ID is not set in shoal's environment; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, name a credentials_file, or use credentials: default (the SDK's default chain: instance role, SSO, web identity)\n" +
				`testdata/shoal.yaml:7:14: providers[0].profile: applies to credentials: file or default only; with env the keys come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY`},
		{"missing profile", "profile: shoal", "profile: nobody",
			`testdata/shoal.yaml:7:23: providers[0].credentials_file: ` + creds + ` has no profile [nobody]`},
		{"profile without keys", "profile: shoal", "profile: role",
			`testdata/shoal.yaml:7:23: providers[0].credentials_file: profile [role] of ` + creds + ` has no aws_access_key_id and aws_secret_access_key (roles, SSO and credential_process are not used)`},
		{"missing file", "credentials_file: aws/credentials", "credentials_file: aws/none",
			`testdata/shoal.yaml:7:23: providers[0].credentials_file: stat ` + filepath.Join(testdataDir(t), "aws/none") + `: no such file or directory`},
		{"template by id and name", "{name: web-lt,", "{id: lt-0123456789abcdef0, name: web-lt,",
			`testdata/shoal.yaml:9:55: providers[0].launch_template.name: a launch template is named by id or by name, not both`},
		{"bad template version", `version: "3"`, `version: latest`,
			`testdata/shoal.yaml:9:46: providers[0].launch_template.version: must be a version number, "$Latest" or "$Default", got "latest"`},
		{"bad template id", "{name: web-lt,", "{id: web-lt,",
			`testdata/shoal.yaml:9:27: providers[0].launch_template.id: must be a launch template ID such as lt-0123456789abcdef0, got "web-lt"`},
		{"no template nor AMI", "    launch_template: {name: web-lt, version: \"3\"}\n", "    instance_type: t3.micro\n",
			`testdata/shoal.yaml:3:5: providers[0].ami: required without launch_template (an instance is made from a launch template, or from an AMI and an instance type)`},
		{"bad AMI", "    launch_template: {name: web-lt, version: \"3\"}\n", "    ami: ubuntu\n    instance_type: t3.micro\n",
			`testdata/shoal.yaml:9:10: providers[0].ami: must be an AMI ID such as ami-0123456789abcdef0, got "ubuntu"`},
		{"bad security group", "[sg-0123456789abcdef0]", "[web]",
			`testdata/shoal.yaml:11:23: providers[0].security_groups[0]: must be a security group ID such as sg-0123456789abcdef0, got "web"`},
		{"bad market", "market: spot", "market: reserved",
			"testdata/shoal.yaml:12:13: providers[0].market: must be on-demand or spot, got \"reserved\"\n" +
				`testdata/shoal.yaml:13:21: providers[0].spot_max_price: applies to spot instances only; set market: spot, or leave it out`},
		{"bad endpoint", "tags:", "endpoint: \"127.0.0.1:5000\"\n    tags:",
			`testdata/shoal.yaml:14:15: providers[0].endpoint: must be an http:// or https:// URL without credentials, got "127.0.0.1:5000"`},
		{"shoal's tag", "{team: web}", "{shoal-owner: me}",
			`testdata/shoal.yaml:14:12: providers[0].tags.shoal-owner: shoal-owner is set by shoal on every instance; choose another key`},
		{"ssh keys on ec2", "tags:", "hosts: []\n    tags:",
			`testdata/shoal.yaml:14:5: providers[0].hosts: unknown field; allowed: name, type, health_grace, port, interval, boot_timeout, create_timeout, delete_timeout, emulator, region, credentials, credentials_file, profile, role_arn, role_session_name, endpoint, launch_template, ami, instance_type, instance_types, subnet, subnets, user_data, security_groups, key_name, iam_instance_profile, market, spot_max_price, spot, address, tags`},
		{"unknown plan in instance_types", "{medium: t3.small,", "{huge: t3.small,",
			`testdata/shoal.yaml:15:22: providers[0].instance_types.huge: no group on provider aws has a plan "huge"; plans: largest, medium, smallest`},
		{"bad instance type", "largest: [c7g.xlarge, c6g.xlarge]}", "largest: big}",
			`testdata/shoal.yaml:15:49: providers[0].instance_types.largest: must be an instance type such as t3.micro, got "big"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := parseEdited(t, ec2Doc, tt.old, tt.new)
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse error:\n got: %s\nwant: %s", got, tt.want)
			}
			if strings.Contains(err.Error(), "secret-example") {
				t.Errorf("an error shows a secret key: %v", err)
			}
		})
	}
}
