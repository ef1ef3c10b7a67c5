package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/testcluster"
)

// TestPlumbing checks the broker and storage behaviour that weir's
// exactly-once design rests on, on whichever provider testcluster picks:
// transactions are atomic for read_committed readers, a new producer with the
// same transactional id fences the old one, and S3 conditional PUTs refuse
// to overwrite.
func TestPlumbing(t *testing.T) {
	t.Run("transactions", func(t *testing.T) { checkTransactions(t, testcluster.Kafka(t)) })
	t.Run("fencing", func(t *testing.T) { checkFencing(t, testcluster.Kafka(t)) })
	t.Run("s3", func(t *testing.T) { checkS3(t, testcluster.S3(t)) })
}

const sentinel = "end"

func checkTransactions(t *testing.T, c *testcluster.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := testcluster.UniqueName(t, "txn")
	c.CreateTopics(t, 1, topic) // one partition: order is checkable
	p := c.Client(t,
		kgo.TransactionalID(testcluster.UniqueName(t, "txid")),
		kgo.DefaultProduceTopic(topic),
	)

	const n = 1000
	produceTxn(ctx, t, p, kgo.TryCommit, numbered("c", n)...)
	produceTxn(ctx, t, p, kgo.TryAbort, numbered("a", n)...)
	produceTxn(ctx, t, p, kgo.TryCommit, sentinel)

	committed := readUntilSentinel(ctx, t, c, topic, kgo.ReadCommitted())
	if want := numbered("c", n); !slices.Equal(committed, want) {
		t.Fatalf("read_committed saw %d records %s, want exactly the %d committed ones in order",
			len(committed), summary(committed), n)
	}
	// The aborted records were written: a read_uncommitted reader sees them,
	// so the check above is about isolation, not about a lost produce.
	all := readUntilSentinel(ctx, t, c, topic, kgo.ReadUncommitted())
	if want := append(numbered("c", n), numbered("a", n)...); !slices.Equal(all, want) {
		t.Fatalf("read_uncommitted saw %d records %s, want the %d committed then the %d aborted",
			len(all), summary(all), n, n)
	}
}

// checkFencing fences a transactional producer (the zombie) by starting a
// second one with the same transactional id (the owner), then has the zombie
// either commit at once or produce first. Both must fail with a fencing error
// and leave nothing of the zombie's visible.
func checkFencing(t *testing.T, c *testcluster.Cluster) {
	for _, tc := range []struct {
		name         string
		produceAfter bool // the zombie produces after being fenced, then commits
	}{
		{name: "commit after fence"},
		{name: "produce after fence", produceAfter: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			topic := testcluster.UniqueName(t, "fence")
			c.CreateTopics(t, 1, topic)
			opts := []kgo.Opt{kgo.TransactionalID(testcluster.UniqueName(t, "txid")), kgo.DefaultProduceTopic(topic)}

			zombie := c.Client(t, opts...)
			if err := zombie.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := zombie.ProduceSync(ctx, kgo.StringRecord("zombie-1")).FirstErr(); err != nil {
				t.Fatalf("zombie's first produce: %v", err)
			}

			// The owner's InitProducerID bumps the epoch, which aborts the
			// zombie's open transaction and fences the zombie.
			owner := c.Client(t, opts...)
			if err := owner.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := owner.ProduceSync(ctx, kgo.StringRecord("owner-1")).FirstErr(); err != nil {
				t.Fatalf("owner's produce: %v", err)
			}

			var produceErr error
			if tc.produceAfter {
				produceErr = zombie.ProduceSync(ctx, kgo.StringRecord("zombie-2")).FirstErr()
				t.Logf("fenced zombie's produce: %v", produceErr)
				if !isFenced(produceErr) {
					t.Fatalf("fenced zombie's produce: got %v, want a fencing error", produceErr)
				}
			}
			commitErr := zombie.EndTransaction(ctx, kgo.TryCommit)
			t.Logf("fenced zombie's commit: %v", commitErr)
			switch {
			case commitErr == nil:
				t.Fatal("fenced zombie committed its transaction")
			case !tc.produceAfter && !isFenced(commitErr):
				// After a failed produce kgo refuses the commit itself
				// (OPERATION_NOT_ATTEMPTED); only a direct EndTxn reaches
				// the coordinator's fencing check.
				t.Fatalf("fenced zombie's commit: got %v, want a fencing error", commitErr)
			}

			produceTxnIn(ctx, t, owner, kgo.TryCommit, sentinel) // ends the owner's open transaction
			if got := readUntilSentinel(ctx, t, c, topic, kgo.ReadCommitted()); !slices.Equal(got, []string{"owner-1"}) {
				t.Fatalf("read_committed saw %q, want only the owner's record", got)
			}
		})
	}
}

// isFenced reports whether err says another producer took over the
// transactional id. Which code arrives depends on the broker, its
// transaction protocol version and the request that noticed.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.InvalidProducerIDMapping)
}

func checkS3(t *testing.T, b *testcluster.Bucket) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := b.Client(t)
	key, other := b.Prefix+"chk-1/manifest", b.Prefix+"chk-2/manifest"
	put := func(key, body string, ifNoneMatch bool) error {
		in := &s3.PutObjectInput{Bucket: &b.Name, Key: aws.String(key), Body: bytes.NewReader([]byte(body))}
		if ifNoneMatch {
			in.IfNoneMatch = aws.String("*")
		}
		_, err := cl.PutObject(ctx, in)
		return err
	}

	if err := put(key, "first", false); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	err := put(key, "second", true)
	var re *awshttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusPreconditionFailed {
		t.Fatalf("conditional put over an existing key: got %v, want HTTP 412", err)
	}
	if err := put(other, "other", true); err != nil {
		t.Fatalf("conditional put of a new key %s: %v", other, err)
	}

	if got := list(ctx, t, cl, b); !slices.Equal(got, []string{key, other}) {
		t.Fatalf("list %s = %q, want %q", b.Prefix, got, []string{key, other})
	}
	obj, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.Name, Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	body, err := io.ReadAll(obj.Body)
	obj.Body.Close()
	if err != nil || string(body) != "first" {
		t.Fatalf("get %s = %q, %v; want %q (the refused put must not overwrite)", key, body, err, "first")
	}

	for _, k := range []string{key, other} {
		if _, err := cl.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b.Name, Key: aws.String(k)}); err != nil {
			t.Fatalf("delete %s: %v", k, err)
		}
	}
	if got := list(ctx, t, cl, b); len(got) != 0 {
		t.Fatalf("list after delete = %q, want nothing", got)
	}
	_, err = cl.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.Name, Key: aws.String(key)})
	var nsk *types.NoSuchKey
	if !errors.As(err, &nsk) {
		t.Fatalf("get after delete: got %v, want NoSuchKey", err)
	}
}

func list(ctx context.Context, t *testing.T, cl *s3.Client, b *testcluster.Bucket) []string {
	t.Helper()
	var keys []string
	pages := s3.NewListObjectsV2Paginator(cl, &s3.ListObjectsV2Input{Bucket: &b.Name, Prefix: &b.Prefix})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			t.Fatalf("list %s: %v", b.Prefix, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, *o.Key)
		}
	}
	return keys
}

// produceTxn writes values in one transaction of its own and ends it.
func produceTxn(ctx context.Context, t *testing.T, p *kgo.Client, end kgo.TransactionEndTry, values ...string) {
	t.Helper()
	if err := p.BeginTransaction(); err != nil {
		t.Fatalf("begin transaction: %v", err)
	}
	produceTxnIn(ctx, t, p, end, values...)
}

// produceTxnIn writes values into the open transaction and ends it.
func produceTxnIn(ctx context.Context, t *testing.T, p *kgo.Client, end kgo.TransactionEndTry, values ...string) {
	t.Helper()
	rs := make([]*kgo.Record, len(values))
	for i, v := range values {
		rs[i] = kgo.StringRecord(v)
	}
	if err := p.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce %d records: %v", len(rs), err)
	}
	if err := p.EndTransaction(ctx, end); err != nil {
		t.Fatalf("end transaction (commit=%v): %v", end, err)
	}
}

// readUntilSentinel reads topic from the start with a fresh consumer and
// returns every value before the sentinel record.
func readUntilSentinel(ctx context.Context, t *testing.T, c *testcluster.Cluster, topic string, level kgo.IsolationLevel) []string {
	t.Helper()
	cl := c.Client(t,
		kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(level),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	defer cl.Close()
	var got []string
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no sentinel after %d records %s: %v", len(got), summary(got), err)
		}
		for _, e := range fs.Errors() {
			t.Fatalf("fetch %s/%d: %v", e.Topic, e.Partition, e.Err)
		}
		for _, r := range fs.Records() {
			if string(r.Value) == sentinel {
				return got
			}
			got = append(got, string(r.Value))
		}
	}
}

func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return out
}

// summary shortens a long record list for failure messages.
func summary(vs []string) string {
	if len(vs) <= 6 {
		return fmt.Sprintf("%q", vs)
	}
	return fmt.Sprintf("%q ... %q", vs[:3], vs[len(vs)-3:])
}
