package ec2

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider/cloud"
)

// sdkError is err as the SDK returns an API's answer of status: an
// operation error around a response error around the API error. Moto does
// not throttle nor run out of capacity, so these are built here.
func sdkError(op string, status int, code, msg string) error {
	return &smithy.OperationError{ServiceID: "EC2", OperationName: op, Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
			Err:      &smithy.GenericAPIError{Code: code, Message: msg},
		},
		RequestID: "req-1",
	}}
}

func TestAPIErr(t *testing.T) {
	tests := []struct {
		status    int
		code      string
		retryable bool
		want      string
	}{
		{503, "RequestLimitExceeded", true, "ec2 RunInstances: RequestLimitExceeded: the message (temporary)"},
		{400, "Throttling", true, "ec2 RunInstances: Throttling: the message (temporary)"},
		{400, "ThrottlingException", true, "ec2 RunInstances: ThrottlingException: the message (temporary)"},
		{500, "InsufficientInstanceCapacity", true, "ec2 RunInstances: InsufficientInstanceCapacity: the message (temporary)"},
		{500, "InternalError", true, "ec2 RunInstances: InternalError: the message (temporary)"},
		{502, "SomethingNew", true, "ec2 RunInstances: SomethingNew: the message (temporary)"},
		{429, "SlowDown", true, "ec2 RunInstances: SlowDown: the message (temporary)"},
		{400, "SomethingNew", false, "ec2 RunInstances: SomethingNew: the message"},
		{400, "InstanceLimitExceeded", true, "ec2 RunInstances: InstanceLimitExceeded: the message (the account's limit of running instances is reached, retried until create_timeout: raise it in Service Quotas, or lower the group's max_size)"},
		{400, "VcpuLimitExceeded", true, "ec2 RunInstances: VcpuLimitExceeded: the message (the account's vCPU limit for this instance family is reached, retried until create_timeout: raise it in Service Quotas, or lower the group's max_size)"},
		{400, "MaxSpotInstanceCountExceeded", true, "ec2 RunInstances: MaxSpotInstanceCountExceeded: the message (the account's limit of spot instances is reached, retried until create_timeout: raise it, or use market: on-demand)"},
		{400, "InvalidAMIID.Malformed", false, "ec2 RunInstances: InvalidAMIID.Malformed: the message (check ami (or the launch template's AMI): it must exist in the provider's region and be usable by the account)"},
		{400, "InvalidSubnetID.NotFound", false, "ec2 RunInstances: InvalidSubnetID.NotFound: the message (check subnet: it must exist in the provider's region)"},
		{401, "AuthFailure", false, "ec2 RunInstances: AuthFailure: the message (EC2 refused the credentials: check credentials_file and profile, the environment's keys, or with credentials: default the chain's source and role_arn)"},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			sdk := sdkError("RunInstances", tt.status, tt.code, "the message")
			err := (&Driver{}).apiErr(context.Background(), "RunInstances", sdk)
			if got := errors.Is(err, cloud.ErrRetryable); got != tt.retryable {
				t.Errorf("retryable = %v, want %v", got, tt.retryable)
			}
			if err.Error() != tt.want {
				t.Errorf("error:\n got: %s\nwant: %s", err, tt.want)
			}
			var ae smithy.APIError
			if !errors.As(err, &ae) || ae.ErrorCode() != tt.code {
				t.Errorf("the SDK's error is not wrapped: %v", ae)
			}
		})
	}
}

func TestAPIErrBounds(t *testing.T) {
	long := strings.Repeat("x", 5000)
	err := (&Driver{}).apiErr(context.Background(), "RunInstances", sdkError("RunInstances", 403, "UnauthorizedOperation", long))
	if len(err.Error()) > maxMessage+300 || errors.Is(err, cloud.ErrRetryable) {
		t.Errorf("UnauthorizedOperation with a long message: %d bytes, retryable %v", len(err.Error()), errors.Is(err, cloud.ErrRetryable))
	}
	// A caller that gave up is not the API failing: not retryable, and
	// said as such.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = (&Driver{}).apiErr(ctx, "DescribeInstances", sdkError("DescribeInstances", 503, "Unavailable", "m"))
	if errors.Is(err, cloud.ErrRetryable) || err.Error() != "ec2 DescribeInstances: context canceled" {
		t.Errorf("after the caller's cancel: %v", err)
	}
	if !notFound(sdkError("TerminateInstances", 400, "InvalidInstanceID.NotFound", "m")) || notFound(sdkError("TerminateInstances", 400, "InvalidInstanceID.Malformed", "m")) {
		t.Error("notFound: only InvalidInstanceID.NotFound means the instance is gone")
	}
}

func TestPhase(t *testing.T) {
	for state, want := range map[string]cloud.Phase{
		"pending": cloud.Pending, "running": cloud.Running, "shutting-down": cloud.Stopping,
		"stopping": cloud.Stopping, "stopped": cloud.Stopped, "terminated": cloud.Gone, "hibernating": cloud.Pending,
	} {
		if got := phase(state); got != want {
			t.Errorf("phase(%s) = %s, want %s", state, got, want)
		}
	}
}

// answerRegions answers a DescribeRegions as EC2 does in region, which the
// driver asks before its first create; it reports whether r was one.
func answerRegions(w http.ResponseWriter, r *http.Request) bool {
	if r.ParseForm() != nil || r.Form.Get("Action") != "DescribeRegions" {
		return false
	}
	io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>
<DescribeRegionsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>5d2e</requestId><regionInfo><item><regionName>`+region+`</regionName><optInStatus>opt-in-not-required</optInStatus></item></regionInfo></DescribeRegionsResponse>`)
	return true
}

// TestThrottledOnTheWire runs the SDK's own decoding of EC2's error
// document: a stub on 127.0.0.1 answers as EC2 does when it throttles,
// which moto never does.
func TestThrottledOnTheWire(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/xml")
		if answerRegions(w, r) {
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>5d2f</RequestID></Response>`)
	}))
	defer srv.Close()
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(creds, []byte("[default]\naws_access_key_id = k\naws_secret_access_key = s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := newDriver(t.Context(), Config{Region: region, CredentialsFile: creds, Profile: "default", Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Create(t.Context(), request("o", "web-001"))
	if !errors.Is(err, cloud.ErrRetryable) || err.Error() != "ec2 RunInstances: RequestLimitExceeded: Request limit exceeded. (temporary)" {
		t.Errorf("Create when throttled: %v; want a retryable RequestLimitExceeded", err)
	}
	_, err = d.List(t.Context(), "o")
	if !errors.Is(err, cloud.ErrRetryable) {
		t.Errorf("List when throttled: %v; want retryable", err)
	}
}

func TestServer(t *testing.T) {
	i := types.Instance{
		InstanceId: aws.String("i-0abc"), PrivateIpAddress: aws.String("10.0.0.5"), PublicIpAddress: aws.String("203.0.113.5"),
		State: &types.InstanceState{Name: types.InstanceStateNameRunning},
		Tags:  []types.Tag{{Key: aws.String(cloud.TagOwner), Value: aws.String("o")}},
	}
	s := (&Driver{cfg: Config{Address: AddressPrivate}}).server(i)
	if s.ID != "i-0abc" || s.Name != "i-0abc" || s.IP != "10.0.0.5" || s.Phase != cloud.Running || s.Tags[cloud.TagOwner] != "o" {
		t.Errorf("private: %+v", s)
	}
	if s := (&Driver{cfg: Config{Address: AddressPublic}}).server(i); s.IP != "203.0.113.5" {
		t.Errorf("public: %+v", s)
	}
}

// TestLimitRetriedUntilCreateTimeout: an account limit on the wire
// (VcpuLimitExceeded) is retried with back-off until create_timeout, and
// the start then fails with the limit and what to change.
func TestLimitRetriedUntilCreateTimeout(t *testing.T) {
	var runs atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err == nil && r.Form.Get("Action") == "RunInstances" {
			runs.Add(1)
		}
		w.Header().Set("Content-Type", "text/xml")
		if answerRegions(w, r) {
			return
		}
		if r.Form.Get("Action") == "DescribeInstances" {
			// A retry first looks for what an earlier attempt made: none.
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>5d30</requestId><reservationSet/></DescribeInstancesResponse>`)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>VcpuLimitExceeded</Code><Message>You have requested more vCPU capacity than your current vCPU limit of 32 allows.</Message></Error></Errors><RequestID>5d2f</RequestID></Response>`)
	}))
	defer srv.Close()
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(creds, []byte("[default]\naws_access_key_id = k\naws_secret_access_key = s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := newDriver(t.Context(), Config{Region: region, CredentialsFile: creds, Profile: "default", Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cloud.New("aws", d, config.CloudProvider{Port: 80, CreateTimeout: 2500 * time.Millisecond}, cloud.Options{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	_, err = p.Start(t.Context(), spec("web-001", 1))
	if err == nil || !strings.Contains(err.Error(), "VcpuLimitExceeded") || !strings.Contains(err.Error(), "raise it in Service Quotas") || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("start against a vCPU limit: %v; want it retried, then the limit and what to change", err)
	}
	if took := time.Since(begin); took < 2*time.Second {
		t.Errorf("gave up after %s, before create_timeout (2.5 s)", took)
	}
	if n := runs.Load(); n < 2 {
		t.Errorf("%d RunInstances calls, want the limit retried", n)
	}
}
