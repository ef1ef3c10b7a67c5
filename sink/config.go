package sink

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/marker"
)

// Encoder turns a value of the job into the Kafka record to write. Topic may
// be left empty (the sink's Config.Topic is used); a record naming another
// topic (name it in Config.Topics) is written there, inside the same
// transaction. The encoder may not keep v or the returned record.
type Encoder[T any] func(v T) (*kgo.Record, error)

// ValueEncoder writes each value with a codec (for instance a state.Codec:
// anything with Append(dst []byte, v T) []byte) as the record value, without
// a key: records spread over partitions by franz-go's default partitioner.
func ValueEncoder[T any](c interface{ Append([]byte, T) []byte }) Encoder[T] {
	return func(v T) (*kgo.Record, error) { return &kgo.Record{Value: c.Append(nil, v)}, nil }
}

// KeyValueEncoder writes key(v) as the record key and the codec's bytes as its
// value: records with the same key go to the same partition.
func KeyValueEncoder[T any](key func(T) []byte, c interface{ Append([]byte, T) []byte }) Encoder[T] {
	return func(v T) (*kgo.Record, error) { return &kgo.Record{Key: key(v), Value: c.Append(nil, v)}, nil }
}

// Delivery is the guarantee a sink gives.
type Delivery string

const (
	// ExactlyOnce writes the records between two barriers in one Kafka
	// transaction, pre-committed at the barrier and committed once the
	// checkpoint completes (two-phase commit, see DESIGN.md). Readers must
	// read read_committed. It is the default.
	ExactlyOnce Delivery = "exactly-once"
	// AtLeastOnce writes with an idempotent producer and flushes at every
	// barrier: everything before a checkpoint is in Kafka when it completes,
	// but a restore writes again what followed it.
	AtLeastOnce Delivery = "at-least-once"
	// None writes fire-and-forget (acks=1, no flush at barriers): records
	// buffered when a task fails are lost.
	None Delivery = "none"
)

// ParseDelivery parses "exactly-once", "at-least-once" or "none".
func ParseDelivery(s string) (Delivery, error) {
	switch v := Delivery(strings.ToLower(strings.TrimSpace(s))); v {
	case ExactlyOnce, AtLeastOnce, None:
		return v, nil
	}
	return "", fmt.Errorf("delivery %q: want %s, %s or %s", s, ExactlyOnce, AtLeastOnce, None)
}

// Defaults and bounds of Config.
const (
	// MinPoolSize is the fewest transactional ids a task's sink may own, the
	// pool for no tolerated failure: one for the open transaction, one for
	// the pre-committed one waiting for its checkpoint, one for the
	// committed one the newest manifest still names (see CheckPoolSize).
	MinPoolSize = 3
	// DefaultPoolSize survives any sequence of failed and completed
	// checkpoints with at most one failure in a row (PoolSizeFor(1)).
	DefaultPoolSize = 5
	// DefaultMaxRecordBytes is the default of Config.MaxRecordBytes:
	// franz-go's default batch limit, Kafka's default max.message.bytes.
	DefaultMaxRecordBytes = 1_000_012
	// DefaultTransactionTimeout bounds how long a pre-committed transaction
	// can wait for its commit. It must exceed interval × (tolerable
	// failures + 1) + restart time (CheckTimeout) and must not exceed the
	// broker's transaction.max.timeout.ms (15 minutes by default).
	DefaultTransactionTimeout = 10 * time.Minute
)

// Config configures a Kafka sink. The zero value of every optional field means
// its documented default. Field names are the setting names that Validate's
// errors use.
type Config[T any] struct {
	// Brokers are the bootstrap addresses (host:port). Required.
	Brokers []string
	// Topic receives the records whose encoder left Record.Topic empty.
	// Required.
	Topic string
	// Topics names the other topics Encode may address. A task's start
	// asks every partition of Topic and of these for transactions its
	// producer ids left open (a marker Kafka skipped; see
	// docs/operating.md): a topic not named is not asked, and a writer
	// that writes one logs a warning saying so, once.
	Topics []string
	// Encode turns a value into a record. Required. A record it leaves
	// without a timestamp gets the event time of the value (the
	// timestamp of the record it came from, or what the source's
	// watermark strategy extracted; see runtime.Position), as Flink's
	// KafkaSink and Kafka Streams write it; without one, the time of
	// writing.
	Encode Encoder[T]

	// Delivery is ExactlyOnce by default.
	Delivery Delivery
	// TransactionalIDPrefix names the transactional ids of the exactly-once
	// sink: "<prefix>-<task>-<slot>". Default: "<job>-<operator>", the
	// job name and the sink operator's name, so that two sinks of one job
	// never share ids. Two jobs (or two sinks) must never share a prefix:
	// each would fence the other. Refused with another delivery.
	TransactionalIDPrefix string
	// PoolSize is K, the number of transactional ids (slots) per task, at
	// least MinPoolSize. Default DefaultPoolSize. See CheckPoolSize.
	PoolSize int
	// TransactionTimeout is the producer's transaction timeout: a
	// transaction neither committed nor aborted within it is aborted by
	// the broker, which loses a pre-committed checkpoint. Default
	// DefaultTransactionTimeout. See CheckTimeout.
	TransactionTimeout time.Duration

	// Compression compresses the record batches the sink writes: "none"
	// (the default, as Kafka's own producer), "gzip", "snappy", "lz4" or
	// "zstd".
	Compression string

	// MaxRecordBytes is the largest record batch the sink's producers
	// write (kgo.ProducerBatchMaxBytes, before compression), so the
	// largest record: Write refuses a record that does not fit with a
	// *RecordTooLargeError, at once, rather than failing the transaction
	// later. Between 512 and 1 GiB; default DefaultMaxRecordBytes. The
	// broker refuses batches over the topic's max.message.bytes, so it
	// should not be larger.
	MaxRecordBytes int

	// Watermarks writes the task's watermark into every partition of
	// Topic, at each checkpoint where it moved, after the checkpoint's
	// records: a weir source with the same setting reads them back, and
	// its tasks go on in the event time of the tasks that wrote (weir's
	// repartition topics; see internal/marker). Records are partitioned
	// by key, a nil key as an empty one; Encode must not choose another
	// topic, and ClientOpts must not set a partitioner.
	Watermarks bool

	// FlushTarget bounds the records in flight (written, not yet
	// acknowledged by the broker) to what the measured acknowledgement
	// rate clears in this time, so that a barrier's flush of the open
	// transaction takes about this long at most; Write waits while the
	// bound is reached (see debloat.go). Set it to the checkpoint
	// interval. 0: only the producer's buffer bounds them.
	FlushTarget time.Duration

	// InFlight, if not nil, bounds the records in flight of this sink's
	// writers together with the other writers that share it (a worker's;
	// see InFlightBudget). Exactly-once only, with FlushTarget set.
	InFlight *InFlightBudget

	// ClientOpts are extra franz-go options (TLS, SASL, linger, batch
	// sizes, a partitioner, ...), applied after the sink's own, so they can
	// override them; overriding the transactional id, the transaction
	// timeout, acks or idempotency breaks the guarantees above.
	ClientOpts []kgo.Opt
}

// Validate reports every bad setting, joined, each naming its field.
func (c *Config[T]) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Brokers) == 0 {
		bad("Brokers: empty, need at least one bootstrap address")
	}
	for i, b := range c.Brokers {
		if strings.TrimSpace(b) == "" {
			bad("Brokers[%d]: empty address", i)
		}
	}
	if c.Topic == "" {
		bad("Topic: empty, need the output topic")
	}
	for i, t := range c.Topics {
		if t == "" {
			bad("Topics[%d]: empty topic name", i)
		}
	}
	if c.Watermarks && len(c.Topics) > 0 {
		bad("Topics: %v, but Watermarks are written into Topic only", c.Topics)
	}
	if c.Encode == nil {
		bad("Encode: nil encoder")
	}
	if _, err := ParseCompression(c.Compression); err != nil {
		bad("Compression: %v", err)
	}
	if m := c.MaxRecordBytes; m != 0 && (m < 512 || m > 1<<30) {
		bad("MaxRecordBytes: %d, want between 512 and 1 GiB (or 0 for %d)", m, DefaultMaxRecordBytes)
	}
	switch c.Delivery {
	case "", ExactlyOnce:
		if c.PoolSize != 0 && c.PoolSize < MinPoolSize {
			bad("PoolSize: %d, want at least %d (or 0 for %d)", c.PoolSize, MinPoolSize, DefaultPoolSize)
		}
		if c.TransactionTimeout < 0 {
			bad("TransactionTimeout: %v, want > 0 (or 0 for %v)", c.TransactionTimeout, DefaultTransactionTimeout)
		}
		if c.FlushTarget < 0 {
			bad("FlushTarget: %v, want >= 0", c.FlushTarget)
		}
		if c.TransactionTimeout > 0 && c.TransactionTimeout < time.Second {
			// The broker's unit is milliseconds, and anything this short
			// aborts transactions faster than a checkpoint can complete.
			bad("TransactionTimeout: %v, want at least 1s", c.TransactionTimeout)
		}
		if p := c.TransactionalIDPrefix; p != "" && strings.TrimSpace(p) != p {
			bad("TransactionalIDPrefix: %q has leading or trailing spaces", p)
		}
	case AtLeastOnce, None:
		if c.TransactionalIDPrefix != "" {
			bad("TransactionalIDPrefix: set, but Delivery is %q (only %q uses transactions)", c.Delivery, ExactlyOnce)
		}
		if c.PoolSize != 0 {
			bad("PoolSize: set, but Delivery is %q (only %q uses transactions)", c.Delivery, ExactlyOnce)
		}
		if c.TransactionTimeout != 0 {
			bad("TransactionTimeout: set, but Delivery is %q (only %q uses transactions)", c.Delivery, ExactlyOnce)
		}
	default:
		bad("Delivery: %q, want %q, %q or %q", c.Delivery, ExactlyOnce, AtLeastOnce, None)
	}
	return errors.Join(errs...)
}

// record encodes v, addressed to c.Topic unless Encode chose a topic, with
// timestamp ts (Unix ms; none if not positive) unless Encode set one.
func (c *Config[T]) record(v T, ts int64) (*kgo.Record, error) {
	r, err := c.Encode(v)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	if r.Topic == "" {
		r.Topic = c.Topic
	}
	if ts > 0 && r.Timestamp.IsZero() {
		r.Timestamp = time.UnixMilli(ts)
	}
	if c.Watermarks && r.Topic != c.Topic {
		return nil, fmt.Errorf("encode: record for topic %q, but Watermarks are written into %q only", r.Topic, c.Topic)
	}
	if n := batchBytes(r); n > c.maxRecordBytes() {
		return nil, &RecordTooLargeError{Topic: r.Topic, Bytes: n, Max: c.maxRecordBytes()}
	}
	return r, nil
}

// checkedTopics are the topics the start-up check asks: Topic, then the
// other Topics, each once.
func (c *Config[T]) checkedTopics() []string {
	out := []string{c.Topic}
	for _, t := range c.Topics {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

func (c *Config[T]) maxRecordBytes() int {
	if c.MaxRecordBytes == 0 {
		return DefaultMaxRecordBytes
	}
	return c.MaxRecordBytes
}

// batchBytes is at least the size of a record batch holding r alone, as
// the producer measures it against its limit: the batch header (61
// bytes), the record's fields and the most their lengths can take.
func batchBytes(r *kgo.Record) int {
	n := 61 + 36 + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += 10 + len(h.Key) + len(h.Value)
	}
	return n
}

// RecordTooLargeError is the error of a Write whose record does not fit
// Config.MaxRecordBytes. It wraps kerr.MessageTooLarge, as the producer's
// and the broker's refusals do.
type RecordTooLargeError struct {
	Topic string
	// Bytes is the size of a batch of the record alone; Max the limit.
	Bytes, Max int
}

func (e *RecordTooLargeError) Error() string {
	return fmt.Sprintf("record for topic %s takes %d bytes in a batch, over the sink's MaxRecordBytes %d", e.Topic, e.Bytes, e.Max)
}

func (e *RecordTooLargeError) Unwrap() error { return kerr.MessageTooLarge }

// ParseCompression parses a compression setting ("" is "none").
func ParseCompression(s string) (kgo.CompressionCodec, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("%q, want none, gzip, snappy, lz4 or zstd", s)
}

// clientOpts are the options every producer of the sink starts with.
func (c *Config[T]) clientOpts() []kgo.Opt {
	codec, _ := ParseCompression(c.Compression) // validated
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.DefaultProduceTopic(c.Topic), kgo.ProducerBatchCompression(codec),
		kgo.ProducerBatchMaxBytes(int32(c.maxRecordBytes()))}
	if c.Watermarks {
		opts = append(opts, kgo.RecordPartitioner(marker.Partitioner()))
	}
	return opts
}

// linger is how long an exactly-once producer waits to fill a batch
// before it sends it. Its output becomes visible only when its checkpoint
// commits, and a barrier's flush sends at once, so a short wait costs no latency a reader sees; it
// saves requests where many tasks each write a little (a task's producer
// writes its task's share only: at 64 tasks a request per record batch of
// a few records cost more than the records). Kafka's own producer waits
// 5 ms by default, Kafka Streams' 100 ms.
const linger = 10 * time.Millisecond

func (c *Config[T]) delivery() Delivery {
	if c.Delivery == "" {
		return ExactlyOnce
	}
	return c.Delivery
}

func (c *Config[T]) poolSize() int {
	if c.PoolSize == 0 {
		return DefaultPoolSize
	}
	return c.PoolSize
}

func (c *Config[T]) txnTimeout() time.Duration {
	if c.TransactionTimeout == 0 {
		return DefaultTransactionTimeout
	}
	return c.TransactionTimeout
}

// CheckTimeout refuses a transaction timeout that a pre-committed transaction
// can outlive while the checkpoint naming it is still restorable: the
// transaction must survive tolerableFailures failed checkpoints after its
// own (each an interval long), one more interval for the checkpoint that
// commits it, and the time a failed task takes to restart and resume it
// (restartAllowance: restart backoff, restore download, broker round
// trips). A shorter timeout lets the broker abort a transaction whose
// checkpoint is the newest, which invalidates it (see Validate). The worker
// calls this at start with its configuration.
func CheckTimeout(txnTimeout, interval time.Duration, tolerableFailures int, restartAllowance time.Duration) error {
	if txnTimeout <= 0 || interval <= 0 || tolerableFailures < 0 || restartAllowance < 0 {
		return fmt.Errorf("sink transaction timeout check: transaction timeout (%v) and checkpoint interval (%v) must be positive, tolerable failures (%d) and restart allowance (%v) not negative",
			txnTimeout, interval, tolerableFailures, restartAllowance)
	}
	need := interval*time.Duration(tolerableFailures+1) + restartAllowance
	if txnTimeout <= need {
		return fmt.Errorf("sink transaction timeout %v is too short: it must exceed checkpoint interval %v × (tolerable failures %d + 1) + restart allowance %v = %v; raise the sink's TransactionTimeout (at most the broker's transaction.max.timeout.ms) or lower the checkpoint interval or tolerable failures",
			txnTimeout, interval, tolerableFailures, restartAllowance, need)
	}
	return nil
}

// PoolSizeFor is the fewest transactional ids per task that survive every
// sequence of failed and completed checkpoints with at most
// tolerableFailures failures in a row, counting from a restore too:
// 2 × tolerableFailures + 3.
//
// The proof, with f = tolerableFailures. The coordinator runs one
// checkpoint at a time and fails the task at the (f+1)th failure in a row,
// so a completed checkpoint commits at most f+1 transactions: those of the
// f failed checkpoints before it and its own. Its manifest names them all,
// so their slots stay held until the next checkpoint completes (pool
// .complete); a restored manifest's committables, also at most f+1, are
// held the same way until the first completion after the restore. Until
// that next completion the sink pre-commits at most f+1 more transactions
// (f failures, then the completing one) and, right after the last of them,
// opens one to write into. At that moment it holds (f+1) + (f+1) + 1 =
// 2f+3 slots, and never more: the completion frees the first f+1. The
// bound is reached by f failures, a completion, f failures and a
// pre-commit, which is why f+3 was not enough (3 failures, a completion,
// a failure and a pre-commit ran out with f=3).
func PoolSizeFor(tolerableFailures int) int { return 2*tolerableFailures + MinPoolSize }

// CheckPoolSize refuses a pool of transactional ids too small for the
// checkpoints a job tolerates to fail (PoolSizeFor). The sink cannot wait
// for a slot (commits arrive on the goroutine that would wait), so running
// out fails the task with ErrNoFreeSlot; the worker calls this at start so
// that a configuration which could run out is refused instead.
func CheckPoolSize(poolSize, tolerableFailures int) error {
	if need := PoolSizeFor(tolerableFailures); poolSize < need {
		return fmt.Errorf("sink pool size %d is too small for %d tolerable checkpoint failures: need at least 2 × tolerable failures + %d = %d transactional ids per task; raise the sink's PoolSize or lower tolerable failures",
			poolSize, tolerableFailures, MinPoolSize, need)
	}
	return nil
}
