package ec2

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// signedBy records the access key ID each EC2 request was signed with.
type signedBy struct {
	mu   sync.Mutex
	keys []string
}

func (s *signedBy) option(o *ec2.Options) {
	o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
		return st.Finalize.Add(middleware.FinalizeMiddlewareFunc("shoal-signed-by", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			if r, ok := in.Request.(*smithyhttp.Request); ok {
				// Credential=AKID/date/region/service/aws4_request
				_, cred, _ := strings.Cut(r.Header.Get("Authorization"), "Credential=")
				key, _, _ := strings.Cut(cred, "/")
				s.mu.Lock()
				s.keys = append(s.keys, key)
				s.mu.Unlock()
			}
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
	})
}

func (s *signedBy) last() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.keys) == 0 {
		return ""
	}
	return s.keys[len(s.keys)-1]
}

// fakeIMDS serves an instance role's keys as EC2's instance metadata
// service does (IMDSv2: a token first), on 127.0.0.1.
func fakeIMDS(t *testing.T, key string) (*httptest.Server, *atomic.Int32) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			w.Header().Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", r.Header.Get("X-Aws-Ec2-Metadata-Token-Ttl-Seconds"))
			fmt.Fprint(w, "imds-token")
		case r.Header.Get("X-Aws-Ec2-Metadata-Token") != "imds-token":
			http.Error(w, "no token", http.StatusUnauthorized)
		case strings.HasPrefix(r.URL.Path, "/latest/meta-data/iam/security-credentials") && strings.HasSuffix(r.URL.Path, "/"):
			fmt.Fprint(w, "shoal-role")
		case strings.HasPrefix(r.URL.Path, "/latest/meta-data/iam/security-credentials") && strings.HasSuffix(r.URL.Path, "/shoal-role"):
			asked.Add(1)
			_ = json.NewEncoder(w).Encode(map[string]string{
				"Code": "Success", "Type": "AWS-HMAC", "LastUpdated": time.Now().UTC().Format(time.RFC3339),
				"AccessKeyId": key, "SecretAccessKey": "imds-secret", "Token": "imds-session",
				"Expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
			})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &asked
}

// isolateChain empties what the SDK's default chain reads from this
// machine (the tester's keys, ~/.aws), so that each case names its source.
func isolateChain(t *testing.T) string {
	dir := t.TempDir()
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_EC2_METADATA_DISABLED", "AWS_EC2_METADATA_SERVICE_ENDPOINT"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	return dir
}

// TestCredentialsChain: with credentials: default the keys come from the
// SDK's chain (an instance role through IMDS, the environment, a profile of
// ~/.aws/config), and role_arn assumes a role through STS (moto's); each
// case checks the key EC2 requests were signed with.
func TestCredentialsChain(t *testing.T) {
	e := newMotoEnv(t)
	base := Config{Region: region, Endpoint: e.endpoint, Credentials: CredsDefault, Profile: "default", RoleSessionName: "shoal", Market: OnDemand, Address: AddressPrivate}
	list := func(t *testing.T, cfg Config) string {
		t.Helper()
		s := &signedBy{}
		d, err := newDriver(t.Context(), cfg, s.option)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if _, err := d.List(t.Context(), "owner-creds"); err != nil {
			t.Fatalf("List: %v", err)
		}
		return s.last()
	}

	t.Run("InstanceRole", func(t *testing.T) {
		isolateChain(t)
		imds, asked := fakeIMDS(t, "AKIAIMDSROLEKEY")
		t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.URL)
		if got := list(t, base); got != "AKIAIMDSROLEKEY" {
			t.Errorf("signed with %q, want the instance role's AKIAIMDSROLEKEY", got)
		}
		if asked.Load() == 0 {
			t.Error("the instance role's keys were never asked of IMDS")
		}
	})
	t.Run("Environment", func(t *testing.T) {
		isolateChain(t)
		t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
		t.Setenv("AWS_ACCESS_KEY_ID", "AKIAENVCHAINKEY")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
		if got := list(t, base); got != "AKIAENVCHAINKEY" {
			t.Errorf("signed with %q, want the environment's AKIAENVCHAINKEY", got)
		}
	})
	t.Run("ConfigProfile", func(t *testing.T) {
		dir := isolateChain(t)
		t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
		if err := os.WriteFile(filepath.Join(dir, "config"), []byte("[profile ci]\naws_access_key_id = AKIAPROFILECI\naws_secret_access_key = ci-secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := base
		cfg.Profile = "ci"
		if got := list(t, cfg); got != "AKIAPROFILECI" {
			t.Errorf("signed with %q, want profile ci's AKIAPROFILECI", got)
		}
		cfg.Profile = "missing"
		if _, err := newDriver(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "profile missing") {
			t.Errorf("New with a profile that does not exist: %v", err)
		}
	})
	t.Run("AssumeRole", func(t *testing.T) {
		isolateChain(t)
		t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
		t.Setenv("AWS_ACCESS_KEY_ID", "AKIABASEKEY")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "base-secret")
		cfg := base
		cfg.RoleARN = "arn:aws:iam::123456789012:role/shoal"
		got := list(t, cfg)
		// STS (moto's) hands out temporary keys, ASIA...: EC2 is called
		// with those, not the base keys.
		if got == "AKIABASEKEY" || !strings.HasPrefix(got, "ASIA") {
			t.Errorf("signed with %q, want the assumed role's temporary key (ASIA...)", got)
		}
	})
	// Web identity (EKS's IRSA, a CI's OIDC token): the chain trades the
	// token file's JWT for a role's keys with AssumeRoleWithWebIdentity,
	// which moto's STS answers (it does not check the token's signature),
	// reached through AWS_ENDPOINT_URL_STS. No static key is anywhere.
	t.Run("WebIdentity", func(t *testing.T) {
		dir := isolateChain(t)
		t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
		token := filepath.Join(dir, "token")
		// header.payload.signature, base64url: {"alg":"none"} and an issuer/subject.
		jwt := "eyJhbGciOiJub25lIn0.eyJpc3MiOiJodHRwczovL29pZGMuZXhhbXBsZSIsInN1YiI6InNob2FsIiwiYXVkIjoic3RzLmFtYXpvbmF3cy5jb20ifQ.c2ln"
		if err := os.WriteFile(token, []byte(jwt), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", token)
		t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/shoal-web-identity")
		t.Setenv("AWS_ROLE_SESSION_NAME", "shoal-ci")
		t.Setenv("AWS_ENDPOINT_URL_STS", e.endpoint)
		got := list(t, base)
		if !strings.HasPrefix(got, "ASIA") {
			t.Errorf("signed with %q, want the web identity role's temporary key (ASIA...)", got)
		}
	})
	// Not tested: SSO, for moto cannot serve the IAM Identity Center
	// portal's GetRoleCredentials nor its OIDC login. The SDK's chain
	// reads an SSO profile as it reads the sources above; shoal passes the
	// chain through (credentials: default).
}
