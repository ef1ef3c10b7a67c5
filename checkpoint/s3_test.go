package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/weirstream/weir/internal/faultproxy"
	"github.com/weirstream/weir/internal/testcluster"
)

// newTestS3 opens an S3 storage on bucket b through endpoint (b's own, or a
// fault proxy in front of it) under prefix, with backoff short enough for
// tests.
func newTestS3(t testing.TB, b *testcluster.Bucket, endpoint, prefix string, mod func(*S3Options)) *S3 {
	t.Helper()
	opts := S3Options{
		Bucket:     b.Name,
		Prefix:     prefix,
		Region:     b.Region,
		Endpoint:   endpoint,
		PathStyle:  true,
		MaxBackoff: 5 * time.Millisecond,
	}
	if b.AccessKey != "" {
		opts.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: b.AccessKey, SecretAccessKey: b.SecretKey, Source: "test"}, nil
		})
	}
	if mod != nil {
		mod(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := NewS3(ctx, opts)
	if err != nil {
		t.Fatalf("NewS3: %v", err)
	}
	return st
}

// s3Storages hands out storages under fresh prefixes of one bucket, so that
// a test starts one S3 server (or container) for all its subtests.
func s3Storages(t *testing.T) func(t *testing.T) Storage {
	b := testcluster.S3(t)
	var n atomic.Int64
	return func(t *testing.T) Storage {
		return newTestS3(t, b, b.Endpoint, fmt.Sprintf("%sst%d", b.Prefix, n.Add(1)), nil)
	}
}

func TestS3Storage(t *testing.T) {
	testStorage(t, s3Storages(t))
}

func TestS3ListPagesAndPrefixes(t *testing.T) {
	ctx := context.Background()
	b := testcluster.S3(t)
	st := newTestS3(t, b, b.Endpoint, b.Prefix+"p", nil)
	st.listMaxKeys = 2 // seven objects: four pages
	sibling := newTestS3(t, b, b.Endpoint, b.Prefix+"p2", nil)
	var want []string
	for i := range 7 {
		name := fmt.Sprintf("j/tasks/0/chk-%d/f", 6-i)
		if err := st.Put(ctx, name, strings.NewReader(name)); err != nil {
			t.Fatal(err)
		}
		want = append([]string{name}, want...)
	}
	if err := sibling.Put(ctx, "j/tasks/0/chk-9/f", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	got, err := st.List(ctx, "j/")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("List = %q, want %q", got, want)
	}
	if got, err := sibling.List(ctx, ""); err != nil || !reflect.DeepEqual(got, []string{"j/tasks/0/chk-9/f"}) {
		t.Fatalf("sibling prefix lists %q, %v", got, err)
	}
}

// requestLog is a fault proxy's Decide that records requests and scripts
// faults.
type requestLog struct {
	mu    sync.Mutex
	reqs  []string // "METHOD path?query"
	fault func(r *http.Request, n int) faultproxy.Fault
}

func (l *requestLog) decide(r *http.Request, n int) faultproxy.Fault {
	l.mu.Lock()
	l.reqs = append(l.reqs, r.Method+" "+r.URL.RequestURI())
	l.mu.Unlock()
	if l.fault != nil {
		return l.fault(r, n)
	}
	return faultproxy.Pass
}

func (l *requestLog) count(method, substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.reqs {
		if strings.HasPrefix(r, method+" ") && strings.Contains(r, substr) {
			n++
		}
	}
	return n
}

func startProxy(t *testing.T, upstream string, opts faultproxy.Options) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(upstream, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestS3MultipartRoundTrip(t *testing.T) {
	t.Parallel() // one of the slow ones: they overlap
	ctx := context.Background()
	b := testcluster.S3(t)
	log := &requestLog{}
	p := startProxy(t, b.Endpoint, faultproxy.Options{Decide: log.decide})
	p.Enable(true)
	st := newTestS3(t, b, p.URL, b.Prefix, func(o *S3Options) { o.PartSize = MinS3PartSize })

	data := randomBytes(1, 12<<20)
	// A plain reader, not a seeker: Put must buffer parts to retry them.
	ref, err := PutFile(ctx, st, "j/shared/0/big.sst", io.MultiReader(bytes.NewReader(data)))
	if err != nil {
		t.Fatal(err)
	}
	if ref.Size != int64(len(data)) {
		t.Fatalf("ref size %d", ref.Size)
	}
	if n := log.count("PUT", "partNumber="); n != 3 {
		t.Errorf("uploaded %d parts, want 3 (12 MiB in 5 MiB parts)", n)
	}
	got, err := ReadVerified(ctx, st, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read back different bytes")
	}
	// A corrupted copy fails verification.
	corrupt := bytes.Clone(data)
	corrupt[7<<20] ^= 1
	if err := st.Put(ctx, ref.Name, bytes.NewReader(corrupt)); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadVerified(ctx, st, ref); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadVerified of a corrupted object: %v, want ErrCorrupt", err)
	}
}

func isConditionalPut(r *http.Request) bool {
	return r.Method == http.MethodPut && r.Header.Get("If-None-Match") == "*"
}

func TestS3PutIfAbsentAfterAmbiguousFailure(t *testing.T) {
	ctx := context.Background()
	b := testcluster.S3(t)

	t.Run("own write found", func(t *testing.T) {
		// The first conditional PUT reaches S3 but its answer is lost; the
		// retry is refused (412); the object holds our bytes: success.
		var first atomic.Bool
		log := &requestLog{fault: func(r *http.Request, _ int) faultproxy.Fault {
			if isConditionalPut(r) && first.CompareAndSwap(false, true) {
				return faultproxy.ResetAfter
			}
			return faultproxy.Pass
		}}
		p := startProxy(t, b.Endpoint, faultproxy.Options{Decide: log.decide})
		st := newTestS3(t, b, p.URL, b.Prefix+"own", nil) // its probe writes unharmed
		p.Enable(true)
		name := ManifestName("j", 0, 1)
		if err := st.PutIfAbsent(ctx, name, []byte("manifest")); err != nil {
			t.Fatalf("PutIfAbsent: %v", err)
		}
		if n := log.count("PUT", name); n != 2 {
			t.Errorf("%d PUTs, want 2 (the lost one and the refused retry)", n)
		}
		if st.ownWriteFound.Load() != 1 {
			t.Errorf("ownWriteFound = %d, want 1", st.ownWriteFound.Load())
		}
		// A later write of the same bytes is a plain conflict again.
		if err := st.PutIfAbsent(ctx, name, []byte("manifest")); !errors.Is(err, ErrExists) {
			t.Fatalf("second PutIfAbsent: %v, want ErrExists", err)
		}
	})

	t.Run("someone else's write", func(t *testing.T) {
		// Another writer won; our first attempt got a 500 (outcome
		// unknown), the retry a 412, and the object holds other bytes.
		var first atomic.Bool
		log := &requestLog{fault: func(r *http.Request, _ int) faultproxy.Fault {
			if isConditionalPut(r) && first.CompareAndSwap(false, true) {
				return faultproxy.Error500
			}
			return faultproxy.Pass
		}}
		p := startProxy(t, b.Endpoint, faultproxy.Options{Decide: log.decide})
		st := newTestS3(t, b, p.URL, b.Prefix+"other", nil)
		name := ManifestName("j", 0, 1)
		if err := st.PutIfAbsent(ctx, name, []byte("theirs")); err != nil {
			t.Fatal(err)
		}
		p.Enable(true)
		if err := st.PutIfAbsent(ctx, name, []byte("ours")); !errors.Is(err, ErrExists) {
			t.Fatalf("PutIfAbsent: %v, want ErrExists", err)
		}
		if st.ownWriteFound.Load() != 0 {
			t.Error("took another writer's object for ours")
		}
		if log.count("GET", "") != 1 {
			t.Errorf("%d GETs, want 1 (reading the object back)", log.count("GET", ""))
		}
	})

	t.Run("refused without doubt", func(t *testing.T) {
		// No ambiguous attempt: a 412 is ErrExists without reading back,
		// even when the bytes are the same.
		log := &requestLog{}
		p := startProxy(t, b.Endpoint, faultproxy.Options{Decide: log.decide})
		st := newTestS3(t, b, p.URL, b.Prefix+"plain", nil)
		if err := st.PutIfAbsent(ctx, "m", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := st.PutIfAbsent(ctx, "m", []byte("x")); !errors.Is(err, ErrExists) {
			t.Fatalf("PutIfAbsent: %v, want ErrExists", err)
		}
		if log.count("GET", "") != 0 {
			t.Error("read back after an unambiguous refusal")
		}
	})
}

func TestS3GetResumesAfterBrokenBody(t *testing.T) {
	ctx := context.Background()
	b := testcluster.S3(t)
	var gets atomic.Int64
	log := &requestLog{fault: func(r *http.Request, _ int) faultproxy.Fault {
		if r.Method == http.MethodGet && !strings.Contains(r.URL.RawQuery, "list-type") && gets.Add(1) <= 2 {
			return faultproxy.Truncate
		}
		return faultproxy.Pass
	}}
	p := startProxy(t, b.Endpoint, faultproxy.Options{Decide: log.decide})
	st := newTestS3(t, b, p.URL, b.Prefix, nil)
	data := randomBytes(3, 1<<20)
	ref, err := PutFile(ctx, st, "f", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	p.Enable(true)
	got, err := ReadVerified(ctx, st, ref)
	if err != nil {
		t.Fatalf("ReadVerified through two cut bodies: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("different bytes")
	}
	if n := log.count("GET", ""); n != 3 {
		t.Errorf("%d GETs, want 3 (two cut short, resumed by ranges)", n)
	}
}

func TestS3Retries(t *testing.T) {
	t.Parallel() // one of the slow ones: they overlap
	ctx := context.Background()
	b := testcluster.S3(t)
	for _, f := range []faultproxy.Fault{faultproxy.Error500, faultproxy.Reset, faultproxy.ResetAfter, faultproxy.Stall} {
		t.Run(f.String(), func(t *testing.T) {
			// Every request fails once, then passes.
			var seen sync.Map
			log := &requestLog{fault: func(r *http.Request, _ int) faultproxy.Fault {
				key := r.Method + " " + r.URL.RequestURI() + " " + r.Header.Get("If-None-Match")
				if _, again := seen.LoadOrStore(key, true); again {
					return faultproxy.Pass
				}
				return f
			}}
			p := startProxy(t, b.Endpoint, faultproxy.Options{Decide: log.decide})
			st := newTestS3(t, b, p.URL, b.Prefix+f.String(), func(o *S3Options) {
				o.ResponseTimeout = 100 * time.Millisecond // ends a stall
			})
			p.Enable(true)
			if err := st.Put(ctx, "a", strings.NewReader("A")); err != nil {
				t.Fatalf("Put: %v", err)
			}
			if err := st.PutIfAbsent(ctx, "m", []byte("M")); err != nil {
				t.Fatalf("PutIfAbsent: %v", err)
			}
			if names, err := st.List(ctx, ""); err != nil || !reflect.DeepEqual(names, []string{"a", "m"}) {
				t.Fatalf("List = %q, %v", names, err)
			}
			rc, err := st.Get(ctx, "m")
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || string(got) != "M" {
				t.Fatalf("Get read %q, %v", got, err)
			}
			if err := st.Delete(ctx, "a"); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if c := p.Counts()[f]; c < 5 {
				t.Errorf("injected %s %d times, want one per operation", f, c)
			}
		})
	}

	t.Run("gives up", func(t *testing.T) {
		p := startProxy(t, b.Endpoint, faultproxy.Options{Error500: 1})
		st := newTestS3(t, b, p.URL, b.Prefix+"down", func(o *S3Options) { o.MaxRetries = 2 })
		p.Enable(true)
		if err := st.Put(ctx, "a", strings.NewReader("A")); err == nil || !strings.Contains(err.Error(), "500") {
			t.Fatalf("Put against a failing server: %v", err)
		}
		err := st.PutIfAbsent(ctx, "m", []byte("M"))
		if err == nil || errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "outcome unknown after 3 attempts") {
			t.Fatalf("PutIfAbsent against a failing server: %v", err)
		}
		if _, err := st.Get(ctx, "a"); err == nil || errors.Is(err, ErrNotFound) {
			t.Fatalf("Get against a failing server: %v", err)
		}
	})
}

func TestOpenS3(t *testing.T) {
	ctx := context.Background()
	b := testcluster.S3(t)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("WEIR_S3_ENDPOINT", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	if b.AccessKey != "" {
		t.Setenv("AWS_ACCESS_KEY_ID", b.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", b.SecretKey)
	}
	uri := fmt.Sprintf("s3://%s/%sopened?region=%s&endpoint=%s", b.Name, b.Prefix, b.Region, b.Endpoint)
	st, err := Open(ctx, uri)
	if err != nil {
		t.Fatalf("Open(%q): %v", uri, err)
	}
	s, ok := st.(*S3)
	if !ok {
		t.Fatalf("Open(%q) = %T", uri, st)
	}
	if s.Bucket() != b.Name || s.Prefix() != b.Prefix+"opened/" {
		t.Fatalf("bucket %q prefix %q", s.Bucket(), s.Prefix())
	}
	if err := st.PutIfAbsent(ctx, "m", []byte("x")); err != nil {
		t.Fatal(err)
	}

	missing := fmt.Sprintf("s3://no-such-bucket-%d?endpoint=%s&max_retries=-1", rand.Int(), b.Endpoint)
	if _, err := Open(ctx, missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Open of a missing bucket: %v, want an error naming the URI", err)
	}
}

func TestS3OptionsFromURI(t *testing.T) {
	for _, env := range []string{"WEIR_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"} {
		t.Setenv(env, "")
	}
	for _, tc := range []struct {
		uri     string
		env     map[string]string
		want    S3Options
		wantErr string
	}{
		{uri: "s3://bkt", want: S3Options{Bucket: "bkt"}},
		{uri: "s3://bkt/", want: S3Options{Bucket: "bkt"}},
		{uri: "s3://bkt/a/b/", want: S3Options{Bucket: "bkt", Prefix: "a/b"}},
		{
			uri:  "s3://bkt/p?region=eu-west-1&endpoint=http://127.0.0.1:9000&part_size=16777216&concurrency=2&max_retries=-1",
			want: S3Options{Bucket: "bkt", Prefix: "p", Region: "eu-west-1", Endpoint: "http://127.0.0.1:9000", PathStyle: true, PartSize: 16 << 20, Concurrency: 2, MaxRetries: -1},
		},
		{uri: "s3://bkt?endpoint=http://h:1&path_style=false", want: S3Options{Bucket: "bkt", Endpoint: "http://h:1"}},
		{uri: "s3://bkt", env: map[string]string{"AWS_ENDPOINT_URL_S3": "http://minio:9000"}, want: S3Options{Bucket: "bkt", PathStyle: true}},
		{uri: "s3://bkt", env: map[string]string{"WEIR_S3_ENDPOINT": "http://h:2"}, want: S3Options{Bucket: "bkt", Endpoint: "http://h:2", PathStyle: true}},
		{uri: "s3://", wantErr: "needs a bucket"},
		{uri: "s3:///prefix", wantErr: "needs a bucket"},
		{uri: "s3://key:secret@bkt", wantErr: "not in the URI"},
		{uri: "s3://bkt?regoin=x", wantErr: `unknown setting "regoin"`},
		{uri: "s3://bkt?path_style=maybe", wantErr: "path_style"},
		{uri: "s3://bkt?part_size=big", wantErr: "part_size"},
		{uri: "s3://bkt?endpoint=minio:9000", wantErr: "want a URL"},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			got, err := S3OptionsFromURI(tc.uri)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := NewS3(context.Background(), S3Options{Bucket: "b", PartSize: 1 << 20}); err == nil || !strings.Contains(err.Error(), "part size") {
		t.Fatalf("NewS3 with 1 MiB parts: %v", err)
	}
}

// randomBytes returns n bytes from a ChaCha8 stream seeded with seed.
func randomBytes(seed byte, n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

func TestS3PutFromFailingReaderLeavesNothing(t *testing.T) {
	ctx := context.Background()
	b := testcluster.S3(t)
	st := newTestS3(t, b, b.Endpoint, b.Prefix, func(o *S3Options) { o.PartSize = MinS3PartSize })
	for _, size := range []int{10, MinS3PartSize + 10} { // one PUT; multipart
		failing := io.MultiReader(bytes.NewReader(make([]byte, size)), errReader{errors.New("disk on fire")})
		if err := st.Put(ctx, "f", failing); err == nil || !strings.Contains(err.Error(), "disk on fire") {
			t.Fatalf("Put of %d bytes from a failing reader: %v", size, err)
		}
		if names, err := st.List(ctx, ""); err != nil || len(names) != 0 {
			t.Fatalf("after a failed Put of %d bytes: List = %q, %v", size, names, err)
		}
	}
	// No multipart upload was left behind either.
	out, err := st.Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(b.Name), Prefix: aws.String(b.Prefix)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Uploads) != 0 {
		t.Fatalf("%d multipart uploads left open", len(out.Uploads))
	}
}

// A server that ignores If-None-Match (older MinIO, some look-alikes; here
// a proxy that drops the header) would let two owners' manifests of one
// checkpoint replace each other. NewS3 refuses it, and leaves no probe
// object behind.
func TestS3RefusesAServerWithoutConditionalWrites(t *testing.T) {
	b := testcluster.S3(t)
	p := startProxy(t, b.Endpoint, faultproxy.Options{Decide: func(r *http.Request, _ int) faultproxy.Fault {
		r.Header.Del("If-None-Match")
		return faultproxy.Pass
	}})
	p.Enable(true)
	opts := S3Options{Bucket: b.Name, Prefix: b.Prefix + "nocond", Region: b.Region, Endpoint: p.URL, PathStyle: true}
	if b.AccessKey != "" {
		opts.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: b.AccessKey, SecretAccessKey: b.SecretKey, Source: "test"}, nil
		})
	}
	_, err := NewS3(t.Context(), opts)
	if err == nil || !strings.Contains(err.Error(), "ignores If-None-Match") {
		t.Fatalf("NewS3 through a server without conditional writes: %v; want it refused", err)
	}
	p.Enable(false)
	st := newTestS3(t, b, p.URL, b.Prefix+"nocond", nil)
	if names, err := st.List(t.Context(), ""); err != nil || len(names) != 0 {
		t.Errorf("left behind: %v (%v)", names, err)
	}
}

// TestS3ListRefusesATruncatedListWithoutAWayOn: a server that marks a
// page truncated and gives no continuation token stopped the SDK's
// paginator quietly, and List returned the first page for all of it. It
// is an error now.
func TestS3ListRefusesATruncatedListWithoutAWayOn(t *testing.T) {
	ctx := context.Background()
	b := testcluster.S3(t)
	up, err := url.Parse(b.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	token := regexp.MustCompile(`<NextContinuationToken>[^<]*</NextContinuationToken>`)
	proxy := httputil.NewSingleHostReverseProxy(up)
	proxy.ModifyResponse = func(r *http.Response) error {
		if r.Request.URL.Query().Get("list-type") != "2" {
			return nil
		}
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return err
		}
		body = token.ReplaceAll(body, nil)
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	srv := httptest.NewServer(proxy)
	defer srv.Close()
	st := newTestS3(t, b, srv.URL, b.Prefix+"t", nil)
	st.listMaxKeys = 2
	for i := range 5 {
		if err := st.Put(ctx, fmt.Sprintf("j/o%d", i), strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := st.List(ctx, "j/"); err == nil || !strings.Contains(err.Error(), "continuation token") {
		t.Fatalf("List = %q, %v; want an error: the server said there is more", got, err)
	}
}
