package dynamostore

import (
	"context"
	"fmt"
	"net/url"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idem-go/idem"
)

// URL is a parsed dynamodb:// store URL; see [ParseURL].
type URL struct {
	Table    string
	Region   string // empty: the SDK's default (AWS_REGION, the shared config)
	Endpoint string // empty: the region's DynamoDB endpoint
}

// ErrBadURL is wrapped by the errors of [ParseURL] and [OpenURL] for a URL
// they cannot use. It matches idem.ErrInvalidOption too.
var ErrBadURL = fmt.Errorf("%w: dynamostore: bad store URL", idem.ErrInvalidOption)

// ParseURL parses dynamodb://TABLE?region=REGION&endpoint=URL. TABLE is a
// DynamoDB table name; region and endpoint (an http or https URL, for
// DynamoDB Local, dynalite or a VPC endpoint) are optional and may appear
// once each. Anything else (another scheme, a path, user info, a fragment,
// an unknown or repeated query parameter) is an error wrapping ErrBadURL, so
// that a typo never silently falls back to a default.
func ParseURL(raw string) (URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return URL{}, fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	switch {
	case u.Scheme != "dynamodb":
		return URL{}, fmt.Errorf("%w: scheme %q, want dynamodb://TABLE", ErrBadURL, u.Scheme)
	case u.Opaque != "":
		return URL{}, fmt.Errorf("%w: want dynamodb://TABLE, with two slashes", ErrBadURL)
	case u.Host == "":
		return URL{}, fmt.Errorf("%w: no table: want dynamodb://TABLE?region=REGION", ErrBadURL)
	case u.User != nil:
		return URL{}, fmt.Errorf("%w: user info in the URL; credentials come from the SDK's chain (environment, profile, role)", ErrBadURL)
	case u.Path != "" && u.Path != "/":
		return URL{}, fmt.Errorf("%w: path %q after the table name", ErrBadURL, u.Path)
	case u.Fragment != "" || u.RawFragment != "":
		return URL{}, fmt.Errorf("%w: fragment %q", ErrBadURL, u.Fragment)
	case u.Port() != "" || !tableName.MatchString(u.Host):
		return URL{}, fmt.Errorf("%w: table name %q: want 3 to 255 of a-z A-Z 0-9 _ . -", ErrBadURL, u.Host)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return URL{}, fmt.Errorf("%w: query: %w", ErrBadURL, err)
	}
	p := URL{Table: u.Host}
	for name, vs := range q {
		if len(vs) != 1 {
			return URL{}, fmt.Errorf("%w: parameter %q given %d times", ErrBadURL, name, len(vs))
		}
		v := vs[0]
		switch name {
		case "region":
			if !validRegion(v) {
				return URL{}, fmt.Errorf("%w: region %q", ErrBadURL, v)
			}
			p.Region = v
		case "endpoint":
			e, err := url.Parse(v)
			if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || e.User != nil || e.RawQuery != "" || e.Fragment != "" {
				return URL{}, fmt.Errorf("%w: endpoint %q: want http(s)://host[:port]", ErrBadURL, v)
			}
			p.Endpoint = v
		default:
			return URL{}, fmt.Errorf("%w: unknown parameter %q (known: region, endpoint)", ErrBadURL, name)
		}
	}
	return p, nil
}

// validRegion accepts region names such as us-east-1 or local: lower-case
// letters, digits and dashes.
func validRegion(r string) bool {
	if r == "" || len(r) > 64 {
		return false
	}
	for _, c := range r {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// String returns the URL in the form ParseURL reads.
func (p URL) String() string {
	q := url.Values{}
	if p.Region != "" {
		q.Set("region", p.Region)
	}
	if p.Endpoint != "" {
		q.Set("endpoint", p.Endpoint)
	}
	u := url.URL{Scheme: "dynamodb", Host: p.Table, RawQuery: q.Encode()}
	return u.String()
}

// OpenURL parses raw with [ParseURL], loads the AWS SDK's default
// configuration (credentials from the environment, shared files or the
// instance role; the region from the URL or else the SDK's defaults), and
// returns a store on the table with opts. It does not create the table
// (see [Store.Migrate]) nor contact DynamoDB. `idem serve --store
// dynamodb://TABLE?region=...` is meant to call it.
func OpenURL(ctx context.Context, raw string, opts ...Option) (*Store, error) {
	p, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	var lo []func(*awsconfig.LoadOptions) error
	if p.Region != "" {
		lo = append(lo, awsconfig.WithRegion(p.Region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, fmt.Errorf("%w: no region: add ?region=... to %s or set AWS_REGION", ErrBadURL, p)
	}
	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if p.Endpoint != "" {
			o.BaseEndpoint = aws.String(p.Endpoint)
		}
	})
	return New(client, p.Table, opts...)
}
