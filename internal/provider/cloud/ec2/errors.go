package ec2

import (
	"context"
	"errors"
	"strconv"
	"strings"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/shoal-lb/shoal/internal/provider/cloud"
)

// apiError is an EC2 API error in words an operator can act on. It wraps
// the SDK's error, and cloud.ErrRetryable when a later attempt may succeed.
type apiError struct {
	op        string
	code      string // the API's error code, "" when no answer came
	msg       string
	hint      string
	retryable bool
	// statusOnly: an answer that is no API error (a proxy's page, an
	// empty body, an emulator's 500).
	statusOnly bool
	err        error
}

func (e *apiError) Error() string {
	var b strings.Builder
	b.WriteString("ec2 " + e.op + ": ")
	if e.code != "" {
		b.WriteString(e.code + ": ")
	}
	b.WriteString(e.msg)
	if e.hint != "" {
		b.WriteString(" (" + e.hint + ")")
	}
	return b.String()
}

func (e *apiError) Unwrap() []error {
	if e.retryable {
		return []error{cloud.ErrRetryable, e.err}
	}
	return []error{e.err}
}

// maxMessage bounds the API's message in an error (UnauthorizedOperation
// carries a long encoded one) so that a job's reason stays readable.
const maxMessage = 400

// retryableCodes are the codes of errors that pass: capacity that EC2
// lacks right now, throttling, the API's own failures, and the account's
// limits, which instances ending (a deploy's old ones, another group's
// scale-in) free: retried until create_timeout, with the limit's hint.
var retryableCodes = map[string]bool{
	"InstanceLimitExceeded":                true,
	"VcpuLimitExceeded":                    true,
	"MaxSpotInstanceCountExceeded":         true,
	"InsufficientInstanceCapacity":         true,
	"InsufficientHostCapacity":             true,
	"InsufficientReservedInstanceCapacity": true,
	"InsufficientCapacity":                 true,
	"RequestLimitExceeded":                 true,
	"Throttling":                           true,
	"ThrottlingException":                  true,
	"RequestThrottled":                     true,
	"ServiceUnavailable":                   true,
	"Unavailable":                          true,
	"InternalError":                        true,
	"InternalFailure":                      true,
}

// hints say what to change for the errors that retrying cannot cure, by
// code prefix (InvalidAMIID.NotFound, InvalidAMIID.Malformed, ...).
var hints = []struct{ prefix, hint string }{
	{"InstanceLimitExceeded", "the account's limit of running instances is reached, retried until create_timeout: raise it in Service Quotas, or lower the group's max_size"},
	{"VcpuLimitExceeded", "the account's vCPU limit for this instance family is reached, retried until create_timeout: raise it in Service Quotas, or lower the group's max_size"},
	{"MaxSpotInstanceCountExceeded", "the account's limit of spot instances is reached, retried until create_timeout: raise it, or use market: on-demand"},
	{"InsufficientFreeAddressesInSubnet", "the subnet has no free address left: use a larger subnet"},
	{"SpotMaxPriceTooLow", "spot_max_price is below the current spot price"},
	{"InvalidAMIID", "check ami (or the launch template's AMI): it must exist in the provider's region and be usable by the account"},
	{"InvalidSubnet", "check subnet: it must exist in the provider's region"},
	{"InvalidGroup", "check security_groups: each must exist in the subnet's VPC"},
	{"InvalidSecurityGroupID", "check security_groups: each must exist in the subnet's VPC"},
	{"InvalidLaunchTemplate", "check launch_template: the template and its version must exist in the provider's region"},
	{"InvalidKeyPair", "check key_name: the key pair must exist in the provider's region"},
	{"AuthFailure", "EC2 refused the credentials: check credentials_file and profile, the environment's keys, or with credentials: default the chain's source and role_arn"},
	{"InvalidClientTokenId", "EC2 refused the credentials: check credentials_file and profile, the environment's keys, or with credentials: default the chain's source and role_arn"},
	{"SignatureDoesNotMatch", "EC2 refused the credentials: check the secret key"},
	{"UnauthorizedOperation", "the credentials may not do this: allow ec2:RunInstances, ec2:CreateTags, ec2:DescribeInstances, ec2:TerminateInstances and ec2:DescribeRegions (with spot, ec2:DescribeSpotInstanceRequests; with role_arn, sts:AssumeRole on the role)"},
}

// apiErr describes err, the failure of operation op called under ctx.
func (d *Driver) apiErr(ctx context.Context, op string, err error) error {
	e := &apiError{op: op, err: err}
	var ae smithy.APIError
	var re *awshttp.ResponseError
	var send *smithyhttp.RequestSendError
	switch {
	case ctx.Err() != nil:
		// The caller gave up (shutdown, its own deadline): its reason.
		e.msg = ctx.Err().Error()
	case errors.As(err, &ae):
		e.code, e.msg = ae.ErrorCode(), ae.ErrorMessage()
		if len(e.msg) > maxMessage {
			e.msg = e.msg[:maxMessage] + "..."
		}
		status := 0
		if errors.As(err, &re) {
			status = re.HTTPStatusCode()
		}
		e.retryable = retryableCodes[e.code] || status >= 500 || status == 429
		for _, h := range hints {
			if strings.HasPrefix(e.code, h.prefix) {
				e.hint = h.hint
				break
			}
		}
	case errors.Is(err, context.DeadlineExceeded):
		e.msg = "no answer within " + d.callTimeout.String()
		e.retryable = true
	case errors.As(err, &send):
		e.msg = "cannot reach the EC2 API: " + send.Err.Error()
		e.retryable = true
	case errors.As(err, &re):
		// An answer that is no API error (a proxy's page, an empty body).
		e.msg = "HTTP status " + strconv.Itoa(re.HTTPStatusCode())
		e.statusOnly = true
		e.retryable = re.HTTPStatusCode() >= 500 || re.HTTPStatusCode() == 429
	default:
		e.msg = err.Error()
	}
	if e.retryable && e.hint == "" {
		e.hint = "temporary"
	}
	return e
}

// capacityCodes are the errors that say EC2 has no capacity for the
// instance type (in the subnet's zone) right now: a plan's next type may
// have it.
var capacityCodes = map[string]bool{
	"InsufficientInstanceCapacity": true,
	"InsufficientCapacity":         true,
	"Unsupported":                  true, // the type is not offered in the zone
}

// noCapacity reports whether err is one of capacityCodes.
func noCapacity(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && capacityCodes[ae.ErrorCode()]
}

// spotRefusedCodes are EC2's refusals of a spot request that an
// on-demand one of the same type may not meet: no spot capacity, a price
// cap below the market, the account's spot limit.
var spotRefusedCodes = map[string]bool{
	"InsufficientInstanceCapacity": true,
	"InsufficientCapacity":         true,
	"SpotMaxPriceTooLow":           true,
	"MaxSpotInstanceCountExceeded": true,
}

// spotRefused reports whether err is one of spotRefusedCodes.
func spotRefused(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && spotRefusedCodes[ae.ErrorCode()]
}

// notFound reports whether err says the instance does not exist (any
// more).
func notFound(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "InvalidInstanceID.NotFound"
}
