package checkpoint

import (
	"bytes"
	"context"
	"crypto/md5"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// Defaults and limits of S3Options.
const (
	DefaultS3PartSize    = 8 << 20
	MinS3PartSize        = 5 << 20 // S3 refuses smaller parts (but the last)
	DefaultS3Concurrency = 4
	DefaultS3MaxRetries  = 5
	DefaultS3MaxBackoff  = 5 * time.Second
	// DefaultS3ResponseTimeout is short against the checkpoint timeout
	// (30 s): a request that S3 or the network dropped (a stall, a
	// connection a partition or a NAT forgot) is retried on a fresh
	// connection after it, where a wait as long as the checkpoint timeout
	// failed the checkpoint, and at 100 ms checkpoints held the task's
	// output for 20 s after a 10 s cut from S3 had healed. The timer starts
	// once the request, body and all, is sent, so a large part upload does
	// not count against it; S3 answers in tens of milliseconds, and AWS's
	// performance guidelines advise retrying small requests that have not
	// answered within about 2 s.
	DefaultS3ResponseTimeout = 5 * time.Second
)

// S3Options configures an S3 storage. Only Bucket is required.
type S3Options struct {
	Bucket string
	// Prefix is prepended to every object name ("a/b" and "a/b/" alike put
	// objects under "a/b/"); empty: the bucket's root.
	Prefix string
	// Region of the bucket; empty: the SDK's default chain (AWS_REGION, the
	// profile), else us-east-1 when Endpoint is set.
	Region string
	// Endpoint is a custom S3 endpoint (MinIO, a test server), as a base URL.
	// Empty: AWS, or AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL as the SDK reads
	// them.
	Endpoint string
	// PathStyle addresses buckets as endpoint/bucket/key rather than
	// bucket.endpoint/key; MinIO and test servers need it.
	PathStyle bool
	// Concurrency is the number of parts of one Put uploaded in parallel;
	// 0: DefaultS3Concurrency. Callers bound how many Puts run at once.
	Concurrency int
	// PartSize is the size of the parts of a multipart upload, and the size
	// above which a Put is one; 0: DefaultS3PartSize, else at least
	// MinS3PartSize.
	PartSize int64
	// MaxRetries is how often a request is retried after a 5xx response, a
	// throttling error, a connection error or a timeout; 0:
	// DefaultS3MaxRetries, negative: never.
	MaxRetries int
	// MaxBackoff caps the (exponential, jittered) wait between attempts; 0:
	// DefaultS3MaxBackoff.
	MaxBackoff time.Duration
	// ResponseTimeout bounds the wait for a response's headers once a request
	// is sent; past it the attempt fails and is retried. 0:
	// DefaultS3ResponseTimeout.
	ResponseTimeout time.Duration
	// Credentials; nil: the SDK's default chain (environment, shared files,
	// web identity, container and instance roles).
	Credentials aws.CredentialsProvider
	// Logger; nil: no logs.
	Logger *slog.Logger
}

func (o *S3Options) fill() error {
	if o.Bucket == "" {
		return errors.New("s3 storage: no bucket")
	}
	if o.Prefix = strings.Trim(o.Prefix, "/"); o.Prefix != "" {
		if err := checkName(o.Prefix); err != nil {
			return fmt.Errorf("s3 storage: prefix: %w", err)
		}
		o.Prefix += "/"
	}
	switch {
	case o.PartSize == 0:
		o.PartSize = DefaultS3PartSize
	case o.PartSize < MinS3PartSize:
		return fmt.Errorf("s3 storage: part size %d is below the S3 minimum of %d bytes", o.PartSize, MinS3PartSize)
	}
	switch {
	case o.Concurrency == 0:
		o.Concurrency = DefaultS3Concurrency
	case o.Concurrency < 0:
		return fmt.Errorf("s3 storage: concurrency %d is negative", o.Concurrency)
	}
	switch {
	case o.MaxRetries == 0:
		o.MaxRetries = DefaultS3MaxRetries
	case o.MaxRetries < 0:
		o.MaxRetries = 0
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultS3MaxBackoff
	}
	if o.ResponseTimeout <= 0 {
		o.ResponseTimeout = DefaultS3ResponseTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// S3 is a Storage in an S3 bucket (AWS, MinIO, or anything that speaks the
// S3 API including conditional PUTs with If-None-Match). Objects are atomic
// by S3's own guarantee: a PUT or a completed multipart upload shows all of
// an object or nothing. It is safe for concurrent use.
//
// Every request is retried with exponential backoff on 5xx responses,
// throttling, connection errors and timeouts, up to MaxRetries times. Put
// streams its reader in parts of PartSize (multipart above that size), each
// part buffered so that it can be retried. A Get that loses its connection
// mid-body resumes with a ranged GET of the same object version.
//
// An incomplete multipart upload that could not be aborted (the storage was
// unreachable) lingers invisibly in the bucket: give the bucket a lifecycle
// rule that aborts incomplete multipart uploads after a day.
type S3 struct {
	client      *s3.Client
	uploader    *transfermanager.Client
	retryer     aws.Retryer // the client's; PutIfAbsent retries by hand with it
	bucket      string
	prefix      string
	log         *slog.Logger
	listMaxKeys int32 // 0: the server's page size; tests page small

	// ownWriteFound counts PutIfAbsent calls that met their own earlier,
	// ambiguous attempt (tests read it).
	ownWriteFound atomic.Int64
}

var _ Storage = (*S3)(nil)

// NewS3 returns an S3 storage after checking that the bucket is reachable
// with the credentials found (HeadBucket), so that a bad setting fails at
// start and not at the first checkpoint.
func NewS3(ctx context.Context, opts S3Options) (*S3, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	var loadOpts []func(*config.LoadOptions) error
	if opts.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(opts.Region))
	}
	if opts.Credentials != nil {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(opts.Credentials))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("s3 storage: load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		if opts.Endpoint == "" && cfg.BaseEndpoint == nil {
			return nil, fmt.Errorf("s3 storage: bucket %s: no region: set region= in the URI or AWS_REGION", opts.Bucket)
		}
		cfg.Region = "us-east-1" // what MinIO and most S3 look-alikes expect
	}
	retryer := retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = opts.MaxRetries + 1
		o.MaxBackoff = opts.MaxBackoff
		// No client-side retry quota: a checkpoint store retries each
		// request a bounded number of times, and an exhausted quota would
		// fail healthy requests after a burst of faults.
		o.RateLimiter = ratelimit.None
		o.Retryables = append(o.Retryables, retry.IsErrorRetryableFunc(transportRetryable))
	})
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.ResponseHeaderTimeout = opts.ResponseTimeout
		t.MaxIdleConnsPerHost = max(t.MaxIdleConnsPerHost, 2*opts.Concurrency)
	})
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
		o.UsePathStyle = opts.PathStyle
		o.Retryer = retryer
		o.HTTPClient = httpClient
		// Checksums only where an operation requires them: S3 look-alikes
		// (gofakes3, older MinIO) refuse the CRC32 trailers the SDK adds to
		// every PUT by default. Integrity comes from the CRC-32C in every
		// FileRef, the SHA-256 in every manifest, and Content-MD5 on
		// manifests.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	uploader := transfermanager.New(client, func(o *transfermanager.Options) {
		o.PartSizeBytes = opts.PartSize
		o.MultipartUploadThreshold = opts.PartSize
		o.Concurrency = opts.Concurrency
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.FailTimeout = opts.ResponseTimeout // to abort a failed multipart upload
	})
	st := &S3{
		client:   client,
		uploader: uploader,
		retryer:  retryer,
		bucket:   opts.Bucket,
		prefix:   opts.Prefix,
		log:      opts.Logger.With("bucket", opts.Bucket, "prefix", opts.Prefix),
	}
	if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(opts.Bucket)}); err != nil {
		return nil, fmt.Errorf("s3 storage: bucket %s: %w", opts.Bucket, err)
	}
	if err := st.checkConditionalWrites(ctx); err != nil {
		return nil, err
	}
	return st, nil
}

// checkConditionalWrites writes a probe object twice, each time only if
// absent (If-None-Match: *), and wants the second refused. A server that
// ignores the condition (older MinIO, some S3 look-alikes) takes both:
// then two owners' manifests of one checkpoint, or two callers' epochs,
// would overwrite each other without a word, and weir refuses the store.
func (s *S3) checkConditionalWrites(ctx context.Context) error {
	var r [8]byte
	_, _ = crand.Read(r[:])
	name := fmt.Sprintf("probes/conditional-write-%d-%x", time.Now().UnixNano(), r)
	defer func() { _ = s.Delete(context.WithoutCancel(ctx), name) }()
	if err := s.PutIfAbsent(ctx, name, []byte("first\n")); err != nil {
		return fmt.Errorf("s3 storage: bucket %s: write a probe object: %w", s.bucket, err)
	}
	switch err := s.PutIfAbsent(ctx, name, []byte("second\n")); {
	case errors.Is(err, ErrExists):
		return nil
	case err != nil:
		return fmt.Errorf("s3 storage: bucket %s: write a probe object again: %w", s.bucket, err)
	}
	return fmt.Errorf("s3 storage: bucket %s: the server ignores If-None-Match (it replaced an object a PUT with If-None-Match: * found there): "+
		"weir needs conditional writes to keep two owners' checkpoints apart; use AWS S3, a MinIO of 2024 or later, or another store that honours them", s.bucket)
}

// Client returns the storage's S3 client, configured as the storage uses it.
func (s *S3) Client() *s3.Client { return s.client }

// Bucket returns the storage's bucket.
func (s *S3) Bucket() string { return s.bucket }

// Prefix returns the key prefix of every object, "" or ending in "/".
func (s *S3) Prefix() string { return s.prefix }

func (s *S3) key(name string) string { return s.prefix + name }

// Put uploads r to name, replacing any object there: in one PUT up to the
// part size, else as a multipart upload that becomes visible only when
// complete.
func (s *S3) Put(ctx context.Context, name string, r io.Reader) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	_, err := s.uploader.UploadObject(ctx, &transfermanager.UploadObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.key(name)),
		Body:   r,
	})
	if err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	return nil
}

// PutIfAbsent writes data to name with one conditional PUT (If-None-Match:
// *), so that of several writers exactly one wins and the others get
// ErrExists.
//
// It retries by hand rather than in the SDK, to tell a lost race from its
// own success: when an attempt's outcome is unknown (the connection broke
// or a 5xx came after the request was sent, so S3 may have stored it) and a
// later attempt is refused because the object exists, it reads the object
// back, and identical bytes mean the earlier attempt won. If that read
// fails too, the error says the outcome is unknown, and the caller must not
// treat the write as failed for certain: for a manifest, the checkpoint may
// have completed.
func (s *S3) PutIfAbsent(ctx context.Context, name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	sum := md5.Sum(data)
	md5b64 := base64.StdEncoding.EncodeToString(sum[:])
	noRetry := func(o *s3.Options) { o.Retryer = aws.NopRetryer{} }
	maybeWritten := false
	for attempt := 1; ; attempt++ {
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket:        aws.String(s.bucket),
			Key:           aws.String(s.key(name)),
			Body:          bytes.NewReader(data),
			ContentLength: aws.Int64(int64(len(data))),
			ContentMD5:    aws.String(md5b64),
			IfNoneMatch:   aws.String("*"),
		}, noRetry)
		if err == nil {
			return nil
		}
		if isPreconditionFailed(err) {
			if !maybeWritten {
				return fmt.Errorf("put %s: %w", name, ErrExists)
			}
			same, gerr := s.holds(ctx, name, data)
			switch {
			case gerr != nil:
				return fmt.Errorf("put %s: outcome unknown: an earlier attempt may have written it, and reading it back failed: %w", name, gerr)
			case same:
				s.ownWriteFound.Add(1)
				s.log.Info("conditional put: an attempt whose outcome was unknown had written the object", "object", name, "attempts", attempt)
				return nil
			default:
				return fmt.Errorf("put %s: %w", name, ErrExists)
			}
		}
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("put %s: %w", name, cerr)
		}
		retryable := s.retryer.IsErrorRetryable(err) || isConditionalConflict(err)
		if outcomeUnknown(err) {
			maybeWritten = true
		}
		if !retryable || attempt >= s.retryer.MaxAttempts() {
			if maybeWritten {
				return fmt.Errorf("put %s: outcome unknown after %d attempts: %w", name, attempt, err)
			}
			return fmt.Errorf("put %s: %w", name, err)
		}
		delay, derr := s.retryer.RetryDelay(attempt, err)
		if derr != nil {
			return fmt.Errorf("put %s: %w", name, err)
		}
		if err := sleepCtx(ctx, delay); err != nil {
			return fmt.Errorf("put %s: %w", name, err)
		}
	}
}

// holds reports whether the object name holds exactly data.
func (s *S3) holds(ctx context.Context, name string, data []byte) (bool, error) {
	rc, err := s.Get(ctx, name)
	if err != nil {
		return false, err
	}
	defer rc.Close()
	got, err := io.ReadAll(io.LimitReader(rc, int64(len(data))+1))
	if err != nil {
		return false, err
	}
	return bytes.Equal(got, data), nil
}

// Get opens the object name, or returns ErrNotFound. The reader resumes
// after a broken connection (see S3).
func (s *S3) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", name, err)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.key(name)),
	})
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("get %s: %w", name, ErrNotFound)
		}
		return nil, fmt.Errorf("get %s: %w", name, err)
	}
	return &s3Reader{
		s:    s,
		ctx:  ctx,
		name: name,
		body: out.Body,
		etag: aws.ToString(out.ETag),
		size: aws.ToInt64(out.ContentLength),
	}, nil
}

// List returns the names under prefix, sorted, reading every page.
func (s *S3) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	in := &s3.ListObjectsV2Input{
		Bucket: aws.String(s.bucket),
		Prefix: aws.String(s.key(prefix)),
	}
	if s.listMaxKeys > 0 {
		in.MaxKeys = aws.Int32(s.listMaxKeys)
	}
	var names []string
	truncated := false
	for pages := s3.NewListObjectsV2Paginator(s.client, in); pages.HasMorePages(); {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
		truncated = aws.ToBool(page.IsTruncated)
		for _, obj := range page.Contents {
			if name, ok := strings.CutPrefix(aws.ToString(obj.Key), s.prefix); ok {
				names = append(names, name)
			}
		}
	}
	// The paginator stops at a page without a continuation token, or with
	// the one before: a server that says the list goes on and gives no
	// way on would have the first pages taken for all of it (a restore
	// taking an older manifest for the newest).
	if truncated {
		return nil, fmt.Errorf("list %s: the server says the list is truncated and gives no new continuation token", prefix)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// Delete removes the object name; a missing object is not an error.
func (s *S3) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.key(name)),
	})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

// s3Reader reads an object's body; when the connection breaks mid-body it
// asks for the rest (Range from the offset reached) of the same version
// (If-Match on the ETag), at most MaxRetries times.
type s3Reader struct {
	s       *S3
	ctx     context.Context
	name    string
	body    io.ReadCloser
	etag    string
	size    int64
	off     int64
	resumes int
}

func (r *s3Reader) Read(p []byte) (int, error) {
	for {
		n, err := r.body.Read(p)
		r.off += int64(n)
		if err == nil || err == io.EOF {
			return n, err
		}
		if !r.resumable(err) {
			return n, fmt.Errorf("get %s: %w", r.name, err)
		}
		r.resumes++
		r.body.Close()
		if rerr := r.reopen(); rerr != nil {
			r.body = io.NopCloser(errReaderS3{rerr})
			return n, rerr
		}
		if n > 0 {
			return n, nil
		}
	}
}

func (r *s3Reader) resumable(err error) bool {
	return r.ctx.Err() == nil && r.resumes < r.s.retryer.MaxAttempts()-1 &&
		r.s.retryer.IsErrorRetryable(err)
}

func (r *s3Reader) reopen() error {
	if r.off >= r.size {
		r.body = io.NopCloser(strings.NewReader(""))
		return nil
	}
	in := &s3.GetObjectInput{
		Bucket: aws.String(r.s.bucket),
		Key:    aws.String(r.s.key(r.name)),
		Range:  aws.String(fmt.Sprintf("bytes=%d-", r.off)),
	}
	if r.etag != "" {
		in.IfMatch = aws.String(r.etag)
	}
	out, err := r.s.client.GetObject(r.ctx, in)
	if err != nil {
		return fmt.Errorf("get %s: resume at byte %d: %w", r.name, r.off, err)
	}
	// If-Match is S3's check; this one is for servers that ignore it.
	if etag := aws.ToString(out.ETag); r.etag != "" && etag != "" && etag != r.etag {
		out.Body.Close()
		return fmt.Errorf("get %s: resume at byte %d: the object changed (ETag %s, was %s)", r.name, r.off, etag, r.etag)
	}
	r.body = out.Body
	return nil
}

func (r *s3Reader) Close() error { return r.body.Close() }

type errReaderS3 struct{ err error }

func (e errReaderS3) Read([]byte) (int, error) { return 0, e.err }

// transportRetryable adds to the SDK's retryable errors those of a body
// cut short or a connection dropped while a response was read, which the
// SDK reports as deserialization errors.
func transportRetryable(err error) aws.Ternary {
	var netErr net.Error
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE),
		errors.As(err, &netErr) && netErr.Timeout():
		return aws.TrueTernary
	}
	return aws.UnknownTernary
}

func apiErrorCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

func httpStatus(err error) int {
	var respErr *awshttp.ResponseError
	if errors.As(err, &respErr) {
		return respErr.HTTPStatusCode()
	}
	return 0
}

func isNotFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return true
	}
	switch apiErrorCode(err) {
	case "NoSuchKey", "NotFound":
		return true
	case "NoSuchBucket":
		return false
	}
	return httpStatus(err) == http.StatusNotFound
}

func isPreconditionFailed(err error) bool {
	return apiErrorCode(err) == "PreconditionFailed" || httpStatus(err) == http.StatusPreconditionFailed
}

// isConditionalConflict is S3's 409 for conditional writes to one key that
// raced; AWS documents retrying them.
func isConditionalConflict(err error) bool {
	return apiErrorCode(err) == "ConditionalRequestConflict"
}

// outcomeUnknown reports whether a failed request may have taken effect:
// anything but a 4xx response, which S3 sends only for a request it did not
// carry out.
func outcomeUnknown(err error) bool {
	status := httpStatus(err)
	return status == 0 || status >= 500
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
