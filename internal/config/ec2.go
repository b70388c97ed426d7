package config

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"gopkg.in/yaml.v3"
)

// ProviderEC2 runs instances as EC2 instances (package
// provider/cloud/ec2).
const ProviderEC2 = "ec2"

// EC2Driver is the rest of a provider entry of type ec2: where its
// instances run and what they are made from. An instance comes from a
// launch template (whose settings ami, instance_type, subnet and
// security_groups then override), or from ami and instance_type.
type EC2Driver struct {
	Region string `yaml:"region" required:"true"`
	// CredentialsFile is a shared credentials file (the INI file of
	// ~/.aws/credentials) whose Profile holds the keys; without it they
	// come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
	// AWS_SESSION_TOKEN. Nothing else of the SDK's default chain (instance
	// roles, SSO, ~/.aws/config) is used.
	CredentialsFile string `yaml:"credentials_file"`
	Profile         string `yaml:"profile"`
	// Endpoint replaces the EC2 API's address; it is meant for emulators
	// (moto) only.
	Endpoint       string             `yaml:"endpoint"`
	LaunchTemplate *EC2LaunchTemplate `yaml:"launch_template"`
	AMI            string             `yaml:"ami"`
	InstanceType   string             `yaml:"instance_type"`
	// InstanceTypes maps the group's plan names (its plans' names) to an
	// instance type; a plan not listed, or no plan, takes InstanceType
	// (or the launch template's).
	InstanceTypes  map[string]string `yaml:"instance_types"`
	Subnet         string            `yaml:"subnet"`
	SecurityGroups []string          `yaml:"security_groups"`
	KeyName        string            `yaml:"key_name"`
	// IAMInstanceProfile is an instance profile's name or ARN.
	IAMInstanceProfile string `yaml:"iam_instance_profile"`
	// Market is EC2OnDemand or EC2Spot; SpotMaxPrice (USD an hour, "" for
	// the on-demand price) caps a spot instance's price.
	Market       string `yaml:"market"`
	SpotMaxPrice string `yaml:"spot_max_price"`
	// Address is which of an instance's addresses it serves on:
	// EC2AddressPrivate or EC2AddressPublic.
	Address string `yaml:"address"`
	// Tags are put on every instance besides its Name and shoal's markers.
	Tags map[string]string `yaml:"tags"`
}

// EC2LaunchTemplate names a launch template by ID or by name, and its
// version: a number, $Latest or $Default.
type EC2LaunchTemplate struct {
	ID      string `yaml:"id"`
	Name    string `yaml:"name"`
	Version string `yaml:"version"`
}

// Values of EC2Driver.Market and EC2Driver.Address.
const (
	EC2OnDemand       = "on-demand"
	EC2Spot           = "spot"
	EC2AddressPrivate = "private"
	EC2AddressPublic  = "public"
)

// defaultEC2Driver holds the defaults of an ec2 provider's keys.
var defaultEC2Driver = EC2Driver{Profile: "default", Market: EC2OnDemand, Address: EC2AddressPrivate}

// defaultEC2LaunchTemplate holds the defaults of a launch template's keys.
var defaultEC2LaunchTemplate = EC2LaunchTemplate{Version: "$Default"}

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
)

// ec2Driver decodes the keys of a provider of type ec2.
func (d *decoder) ec2Driver(f *fields) *EC2Driver {
	e := defaultEC2Driver
	if r, n := f.str("region", ""); n != nil {
		if !regionRE.MatchString(r) {
			d.errorf(n, f.field("region"), "must be an AWS region such as ap-northeast-1, got %q", r)
		}
		e.Region = r
	}
	d.ec2Credentials(f, &e)
	if ep, n := f.str("endpoint", ""); n != nil {
		if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			d.errorf(n, f.field("endpoint"), "must be an http:// or https:// URL without credentials, got %q", ep)
		}
		e.Endpoint = ep
	}
	if n := f.get("launch_template"); n != nil {
		e.LaunchTemplate = d.ec2LaunchTemplate(n, f.field("launch_template"))
	}
	e.AMI = d.ec2Match(f, "ami", amiRE, "an AMI ID such as ami-0123456789abcdef0")
	e.InstanceType = d.ec2Match(f, "instance_type", instanceTypeRE, "an instance type such as t3.micro")
	if n := f.get("instance_types"); n != nil {
		entries, _ := d.entries(n, f.field("instance_types"))
		e.InstanceTypes = make(map[string]string, len(entries))
		for _, it := range entries {
			field := join(f.field("instance_types"), it.key)
			v, ok := d.value(it.v, field)
			if !ok {
				continue
			}
			if !instanceTypeRE.MatchString(v) {
				d.errorf(it.v, field, "must be an instance type such as t3.micro, got %q", v)
			}
			e.InstanceTypes[it.key] = v
		}
	}
	if e.LaunchTemplate == nil && f.node != nil {
		for _, k := range []string{"ami", "instance_type"} {
			if f.get(k) == nil {
				d.errorf(f.node, f.field(k), "required without launch_template (an instance is made from a launch template, or from an AMI and an instance type)")
			}
		}
	}
	e.Subnet = d.ec2Match(f, "subnet", subnetRE, "a subnet ID such as subnet-0123456789abcdef0")
	for _, it := range f.strings("security_groups") {
		if !securityRE.MatchString(it.val) {
			d.errorf(it.node, it.field, "must be a security group ID such as sg-0123456789abcdef0, got %q", it.val)
		}
		e.SecurityGroups = append(e.SecurityGroups, it.val)
	}
	e.KeyName, _ = f.str("key_name", "")
	e.IAMInstanceProfile, _ = f.str("iam_instance_profile", "")
	if m, n := f.str("market", e.Market); n != nil {
		if m != EC2OnDemand && m != EC2Spot {
			d.errorf(n, f.field("market"), "must be %s or %s, got %q", EC2OnDemand, EC2Spot, m)
		}
		e.Market = m
	}
	if p, n := f.str("spot_max_price", ""); n != nil {
		switch {
		case e.Market != EC2Spot:
			d.errorf(n, f.field("spot_max_price"), "applies to spot instances only; set market: spot, or leave it out")
		case !spotPriceRE.MatchString(p):
			d.errorf(n, f.field("spot_max_price"), `must be a price in USD an hour such as "0.05", got %q`, p)
		}
		e.SpotMaxPrice = p
	}
	if a, n := f.str("address", e.Address); n != nil {
		if a != EC2AddressPrivate && a != EC2AddressPublic {
			d.errorf(n, f.field("address"), "must be %s or %s, got %q", EC2AddressPrivate, EC2AddressPublic, a)
		}
		e.Address = a
	}
	if n := f.get("tags"); n != nil {
		e.Tags = d.ec2Tags(n, f.field("tags"))
	}
	return &e
}

// InstanceTypeFor returns the instance type of a group's plan: its entry
// in instance_types, else instance_type ("" leaves it to the launch
// template).
func (e *EC2Driver) InstanceTypeFor(plan string) string {
	if t, ok := e.InstanceTypes[plan]; ok && plan != "" {
		return t
	}
	return e.InstanceType
}

// ec2Match reads key, which must match re (what describes it).
func (d *decoder) ec2Match(f *fields, key string, re *regexp.Regexp, what string) string {
	v, n := f.str(key, "")
	if n != nil && !re.MatchString(v) {
		d.errorf(n, f.field(key), "must be %s, got %q", what, v)
	}
	return v
}

// ec2Credentials decodes where the keys come from and checks, without
// calling AWS, that they are there. Messages never show a key.
func (d *decoder) ec2Credentials(f *fields, e *EC2Driver) {
	file, fn := f.str("credentials_file", "")
	profile, pn := f.str("profile", e.Profile)
	e.Profile = profile
	if fn == nil {
		if pn != nil {
			d.errorf(pn, f.field("profile"), "applies to credentials_file only; without it the keys come from %s and %s", EnvAWSAccessKeyID, EnvAWSSecretAccessKey)
		}
		for _, v := range []string{EnvAWSAccessKeyID, EnvAWSSecretAccessKey} {
			if f.node != nil && os.Getenv(v) == "" {
				d.errorf(f.node, f.field("credentials_file"), "%s is not set in shoal's environment; set %s and %s, or name a credentials_file", v, EnvAWSAccessKeyID, EnvAWSSecretAccessKey)
				break
			}
		}
		return
	}
	e.CredentialsFile = d.path(file)
	if err := CheckAWSCredentialsFile(e.CredentialsFile, profile); err != nil {
		d.errorf(fn, f.field("credentials_file"), "%v", err)
	}
}

// CheckAWSCredentialsFile makes sure the shared credentials file at path
// holds an access key and a secret for profile, reading no other file.
func CheckAWSCredentialsFile(path, profile string) error {
	if _, err := readRegular(path, maxKeyFile); err != nil {
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

func (d *decoder) ec2LaunchTemplate(n *yaml.Node, path string) *EC2LaunchTemplate {
	f := section[EC2LaunchTemplate](d, n, path)
	lt := defaultEC2LaunchTemplate
	id, in := f.str("id", "")
	name, nn := f.str("name", "")
	switch {
	case f.node == nil:
	case in != nil && nn != nil:
		d.errorf(nn, f.field("name"), "a launch template is named by id or by name, not both")
	case in == nil && nn == nil:
		d.errorf(f.node, f.field("id"), "required: the launch template's id (lt-...) or its name")
	case in != nil && !templateIDRE.MatchString(id):
		d.errorf(in, f.field("id"), "must be a launch template ID such as lt-0123456789abcdef0, got %q", id)
	case nn != nil && !templateNameRE.MatchString(name):
		d.errorf(nn, f.field("name"), "must be a launch template name (3 to 128 of A-Z a-z 0-9 ( ) . / _ -), got %q", name)
	}
	lt.ID, lt.Name = id, name
	if v, vn := f.str("version", lt.Version); vn != nil {
		if n, err := strconv.Atoi(v); v != "$Latest" && v != "$Default" && (err != nil || n < 1) {
			d.errorf(vn, f.field("version"), `must be a version number, "$Latest" or "$Default", got %q`, v)
		}
		lt.Version = v
	}
	return &lt
}

// ec2Tags decodes extra tags; shoal's own (the shoal- prefix, Name) are
// refused, since adoption and sweeping trust them.
func (d *decoder) ec2Tags(n *yaml.Node, path string) map[string]string {
	entries, _ := d.entries(n, path)
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		field := join(path, e.key)
		switch {
		case !tagKeyRE.MatchString(e.key) || strings.HasPrefix(strings.ToLower(e.key), "aws:"):
			d.errorf(e.k, field, "must be an EC2 tag key (1 to 128 letters, digits, spaces and _ . : / = + - @, not aws:...), got %q", e.key)
			continue
		case strings.HasPrefix(e.key, "shoal-") || e.key == "Name":
			d.errorf(e.k, field, "%s is set by shoal on every instance; choose another key", e.key)
			continue
		}
		v, ok := d.value(e.v, field)
		if !ok {
			continue
		}
		if len(v) > 256 {
			d.errorf(e.v, field, "a tag value has at most 256 characters, got %d", len(v))
		}
		out[e.key] = v
	}
	return out
}
