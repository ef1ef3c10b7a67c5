package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/weirstream/weir/checkpoint"
)

// demoS3 is the demo's checkpoint storage: an S3 server (gofakes3, objects
// in memory) on a 127.0.0.1 port, reached over real HTTP by the same S3
// storage code `run --checkpoints s3://...` uses.
type demoS3 struct {
	storage  *checkpoint.S3
	endpoint string // http://127.0.0.1:PORT
	uri      string // for display and Validate; the worker is handed storage
	srv      *http.Server
	served   chan error
}

const (
	demoBucket = "weir-demo"
	demoPrefix = "checkpoints"
)

func startDemoS3(ctx context.Context) (*demoS3, error) {
	backend := s3mem.New()
	if err := backend.CreateBucket(demoBucket); err != nil {
		return nil, fmt.Errorf("demo s3: create bucket: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo s3: %w", err)
	}
	d := &demoS3{
		srv:    &http.Server{Handler: gofakes3.New(backend).Server(), ReadHeaderTimeout: 10 * time.Second},
		served: make(chan error, 1),
	}
	go func() { d.served <- d.srv.Serve(ln) }()
	endpoint := "http://" + ln.Addr().String()
	d.endpoint = endpoint
	d.uri = "s3://" + demoBucket + "/" + demoPrefix + "?" + url.Values{
		"endpoint": {endpoint}, "region": {"us-east-1"}, "path_style": {"true"},
	}.Encode()
	// gofakes3 checks no signatures, but the SDK signs every request: fixed
	// credentials keep the demo off the machine's AWS configuration.
	d.storage, err = checkpoint.NewS3(ctx, checkpoint.S3Options{
		Bucket: demoBucket, Prefix: demoPrefix, Region: "us-east-1", Endpoint: endpoint, PathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "weir", SecretAccessKey: "weir-demo", Source: "demo"}, nil
		}),
	})
	if err != nil {
		d.close()
		return nil, fmt.Errorf("demo s3: %w", err)
	}
	return d, nil
}

func (d *demoS3) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.srv.Shutdown(ctx); err != nil {
		d.srv.Close()
	}
	<-d.served // http.ErrServerClosed
}
