package checkpoint

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// S3OptionsFromURI parses s3://bucket/prefix?setting=value&... into
// options. Settings:
//
//	region=us-east-1      the bucket's region (else AWS_REGION, the profile)
//	endpoint=http://h:p   a custom endpoint (else WEIR_S3_ENDPOINT, else the
//	                      SDK's AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL)
//	path_style=true       path-style addressing; default true when a custom
//	                      endpoint is set by any of the above, else false
//	part_size=8388608     multipart part size in bytes (at least 5 MiB)
//	concurrency=4         parts of one upload in flight
//	max_retries=5         retries of a failed request (-1: none)
//
// Credentials always come from the SDK's default chain.
func S3OptionsFromURI(uri string) (S3Options, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return S3Options{}, fmt.Errorf("checkpoint storage %q: %w", uri, err)
	}
	if u.Scheme != "s3" {
		return S3Options{}, fmt.Errorf("checkpoint storage %q: not an s3:// URI", uri)
	}
	if u.Host == "" {
		return S3Options{}, fmt.Errorf("checkpoint storage %q: s3:// needs a bucket, as in s3://bucket/prefix", uri)
	}
	if u.User != nil {
		return S3Options{}, fmt.Errorf("checkpoint storage %q: put credentials in the environment (AWS_ACCESS_KEY_ID, a profile, a role), not in the URI", uri)
	}
	opts := S3Options{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
	q := u.Query()
	for key := range q {
		switch key {
		case "region", "endpoint", "path_style", "part_size", "concurrency", "max_retries":
		default:
			return S3Options{}, fmt.Errorf("checkpoint storage %q: unknown setting %q; want region, endpoint, path_style, part_size, concurrency or max_retries", uri, key)
		}
	}
	opts.Region = q.Get("region")
	opts.Endpoint = q.Get("endpoint")
	if opts.Endpoint == "" {
		opts.Endpoint = os.Getenv("WEIR_S3_ENDPOINT")
	}
	if opts.Endpoint != "" {
		if e, err := url.Parse(opts.Endpoint); err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return S3Options{}, fmt.Errorf("checkpoint storage %q: endpoint %q: want a URL such as http://127.0.0.1:9000", uri, opts.Endpoint)
		}
	}
	customEndpoint := opts.Endpoint != "" || os.Getenv("AWS_ENDPOINT_URL_S3") != "" || os.Getenv("AWS_ENDPOINT_URL") != ""
	opts.PathStyle = customEndpoint
	if v := q.Get("path_style"); v != "" {
		if opts.PathStyle, err = strconv.ParseBool(v); err != nil {
			return S3Options{}, fmt.Errorf("checkpoint storage %q: path_style=%q: want true or false", uri, v)
		}
	}
	ints := []struct {
		key string
		set func(int64)
	}{
		{"part_size", func(v int64) { opts.PartSize = v }},
		{"concurrency", func(v int64) { opts.Concurrency = int(v) }},
		{"max_retries", func(v int64) { opts.MaxRetries = int(v) }},
	}
	for _, s := range ints {
		if v := q.Get(s.key); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return S3Options{}, fmt.Errorf("checkpoint storage %q: %s=%q: want an integer", uri, s.key, v)
			}
			s.set(n)
		}
	}
	return opts, nil
}
