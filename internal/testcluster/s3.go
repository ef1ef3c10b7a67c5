package testcluster

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Bucket is an S3 bucket a test may use.
type Bucket struct {
	Endpoint  string // base URL, e.g. http://127.0.0.1:PORT; path-style addressing
	Name      string // bucket name; exists
	Region    string
	AccessKey string // empty: the SDK's default credential chain
	SecretKey string
	Provider  string // ProviderEnv, ProviderTestcontainers or ProviderInProcess

	// Prefix is unique to the test ("<test-name>-<random>/"). The bucket may
	// be shared with other tests; write under Prefix.
	Prefix string
}

// S3 returns a bucket for t from the first available provider (see the
// package doc) and logs which one.
func S3(t testing.TB) *Bucket {
	t.Helper()
	b := &Bucket{Region: "us-east-1", Prefix: UniqueName(t, "") + "/"}
	if ep := os.Getenv("WEIR_S3_ENDPOINT"); ep != "" {
		b.Provider = ProviderEnv
		b.Endpoint = ep
		b.Name = envOr("WEIR_S3_BUCKET", "weir-test")
		b.Region = envOr("WEIR_S3_REGION", b.Region)
		b.AccessKey = os.Getenv("WEIR_S3_ACCESS_KEY")
		b.SecretKey = os.Getenv("WEIR_S3_SECRET_KEY")
		b.ensureBucket(t)
		t.Logf("s3 provider: %s (WEIR_S3_ENDPOINT=%s, bucket %s)", b.Provider, b.Endpoint, b.Name)
		return b
	}
	if why, ok := containersWanted(); ok {
		var image string
		b.Provider = ProviderTestcontainers
		b.Endpoint, b.AccessKey, b.SecretKey, image = startMinIOContainer(t)
		b.Name = "weir-test"
		b.ensureBucket(t)
		t.Logf("s3 provider: %s (%s at %s, bucket %s)", b.Provider, image, b.Endpoint, b.Name)
		return b
	} else if why != "" {
		t.Logf("s3: not using testcontainers: %s", why)
	}

	backend := s3mem.New()
	b.Provider = ProviderInProcess
	b.Name = "weir-test"
	if err := backend.CreateBucket(b.Name); err != nil {
		t.Fatalf("gofakes3 create bucket: %v", err)
	}
	// httptest binds 127.0.0.1:0, so the SDK goes through real HTTP and its
	// own signing, checksums and error parsing.
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	b.Endpoint = srv.URL
	b.AccessKey, b.SecretKey = "weir", "weir-secret"
	t.Logf("s3 provider: %s (gofakes3 at %s, bucket %s; set WEIR_S3_ENDPOINT for a real S3)",
		b.Provider, b.Endpoint, b.Name)
	return b
}

// Client returns an S3 client for the bucket's endpoint: path-style, and
// checksums only where an operation requires them, which gofakes3 and MinIO
// need with current SDKs (their default adds CRC32 trailers to every PUT).
func (b *Bucket) Client(t testing.TB) *s3.Client {
	t.Helper()
	var cfg aws.Config
	if b.AccessKey != "" {
		cfg = aws.Config{
			Region: b.Region,
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: b.AccessKey, SecretAccessKey: b.SecretKey, Source: "testcluster"}, nil
			}),
		}
	} else {
		var err error
		cfg, err = config.LoadDefaultConfig(context.Background(), config.WithRegion(b.Region))
		if err != nil {
			t.Fatalf("load AWS config: %v", err)
		}
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(b.Endpoint)
		o.UsePathStyle = true
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
}

// ensureBucket creates the bucket unless it exists (a shared endpoint's
// bucket usually does).
func (b *Bucket) ensureBucket(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in := &s3.CreateBucketInput{Bucket: aws.String(b.Name)}
	if b.Region != "us-east-1" {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{
			LocationConstraint: types.BucketLocationConstraint(b.Region),
		}
	}
	_, err := b.Client(t).CreateBucket(ctx, in)
	var owned *types.BucketAlreadyOwnedByYou
	var exists *types.BucketAlreadyExists
	if err != nil && !errors.As(err, &owned) && !errors.As(err, &exists) {
		t.Fatalf("create bucket %s at %s: %v", b.Name, b.Endpoint, err)
	}
}
