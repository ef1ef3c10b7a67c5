package worker

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/internal/partition"
	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/source"
)

// Config is the configuration of one worker process of a job. Every field is
// a flag (--name), an environment variable (WEIR_NAME, upper snake case) and
// a key of the settings file (name: ...); the command line wins over the
// environment, which wins over the file, which wins over the default. The
// defaults are those of DefaultConfig.
type Config struct {
	// File is a YAML settings file (--config): its keys are the flag names.
	File string
	// Job is the job to run, by name, among those the binary knows; with
	// one job, that one (the default).
	Job string
	// Name names the job instance: it derives the transactional id prefix
	// ("<name>-<sink operator>"), the checkpoint path (<checkpoints>/<name>/)
	// and the lag group ("<name>-lag"). Default: Job. Two instances that
	// share a broker or a checkpoint storage need different names.
	Name string
	// Brokers are the Kafka bootstrap addresses. Default 127.0.0.1:9092.
	Brokers []string
	// Security is how every Kafka client of the worker connects: TLS and
	// SASL (--security-protocol, --tls-*, --sasl-*). Default PLAINTEXT.
	Security Security
	// Topics point the topics a job declares (stream.Read, stream.Write)
	// at other topics in this environment: --topic NAME=TOPIC, repeated or
	// comma-separated. A topic without one is used under its own name.
	Topics map[string]string
	// Input and Output, if set, are the topics of a job that reads one
	// topic and writes one: the overrides of its only read and write. A
	// job with several refuses them; --topic names each.
	Input  string
	Output string
	// Partitioner is the partitioner the input topic's producers used:
	// murmur2 (the default: Kafka's Java client and Kafka Streams,
	// franz-go, librdkafka's murmur2 and murmur2_random), crc32
	// (librdkafka's consistent and consistent_random, its default:
	// confluent-kafka-go, -python, -dotnet) or fnv1a (Sarama's default,
	// librdkafka's fnv1a). Every KeyBy of the job checks each record's key
	// against it: a key it sends to another task is a bad record
	// (OnDecodeError), never a second, partial state (see stream.KeyBy).
	Partitioner string
	// Tasks, if set, are the task indexes (= input partitions) this worker
	// runs, always: a static assignment, without the consumer group. By
	// default the workers of a job join one consumer group (the group id is
	// Name) and it hands out the tasks.
	Tasks []int
	// SessionTimeout is how long the group waits for a silent worker
	// before it hands its tasks to others (Kafka's session.timeout.ms; the
	// broker bounds it, by default to 6s..30min). Default 10s.
	SessionTimeout time.Duration
	// HeartbeatInterval is how often a worker tells the group it lives.
	// Default 1s; less than a third of SessionTimeout.
	HeartbeatInterval time.Duration
	// RebalanceTimeout is how long the group waits for its workers to
	// rejoin in a rebalance, which includes stopping the tasks they give
	// up. Default 60s.
	RebalanceTimeout time.Duration
	// HandoffTimeout bounds how long a worker spends stopping a task it
	// gives up: a final checkpoint and commit if they complete in time,
	// else it stops where it is and the last completed checkpoint stands.
	// Default 20s; less than RebalanceTimeout.
	HandoffTimeout time.Duration
	// Checkpoints is the checkpoint storage: file:///path,
	// s3://bucket/prefix (settings in the query, see checkpoint.Open and
	// checkpoint.S3OptionsFromURI; credentials from the AWS SDK's default
	// chain; AWS_ENDPOINT_URL_S3 and AWS_REGION as the SDK reads them), or
	// memory (lives only as long as the process: tests and trials).
	// Default file://$TMPDIR/weir-checkpoints.
	Checkpoints string
	// Interval, CheckpointTimeout, MinPause and TolerableFailures drive
	// checkpoints (checkpoint.Config). Defaults 1s, 1m, 0, 3.
	Interval          time.Duration
	CheckpointTimeout time.Duration
	MinPause          time.Duration
	TolerableFailures int
	// StateBackend keeps keyed state: pebble (default; one Pebble store per
	// task and operator under StateDir, incremental snapshots) or memory
	// (Go maps, a full snapshot every checkpoint: tests and small state).
	StateBackend string
	// StateMemtableSize bounds a Pebble store's memtable, in bytes: every
	// checkpoint flushes it in the background, so it bounds how long the
	// task's writes wait in a batch (not the pause at the barrier). Default
	// 64 MiB. Pebble only.
	StateMemtableSize int64
	// StateCacheSize is the block cache shared by the worker's Pebble
	// stores, in bytes. Default 64 MiB. Pebble only.
	StateCacheSize int64
	// StateDeltaMemory bounds, per Pebble store, the bytes of delta
	// checkpoints held in memory until storage has them; more are written
	// to the local disk first. 0: every delta is, so that every checkpoint
	// needs the disk. Default 1 MiB. Pebble only.
	StateDeltaMemory int64
	// Memory bounds the records in flight in each task: batches, channels,
	// fetches, the producer's buffer, the largest record.
	Memory Memory
	// StateDir holds local state, a cache of the checkpoints. Each worker
	// takes a slot of its own in it (w0, w1, ...), so workers on one host
	// may share it. Default: $TMPDIR/weir-state/<name>.
	StateDir string
	// StateCleanupDelay is how long the local state of a task that left
	// this worker stays on disk (a task that comes back restores from it
	// instead of downloading); then it is deleted. Default 10m; 0 keeps it.
	StateCleanupDelay time.Duration
	// AllowNonRestoredState restores checkpoints that have state or source
	// positions of operators the job no longer has, dropping them (an
	// upgrade that removed or renamed one; see engine.Config).
	AllowNonRestoredState bool
	// Delivery is the sink's guarantee: exactly-once (default),
	// at-least-once or none.
	Delivery string
	// Compression compresses the batches the worker writes (output and
	// repartition topics): none (default, as Kafka's producer), gzip,
	// snappy, lz4 or zstd.
	Compression string
	// PoolSize is the number of transactional ids per task (exactly-once
	// only), at least 2 × TolerableFailures + 3 (sink.PoolSizeFor).
	// Default 0: exactly that (9 with the default 3).
	PoolSize int
	// TxnTimeout is the sink's transaction timeout (exactly-once only).
	// Default 60s; it must exceed Interval × (TolerableFailures + 1) +
	// RestartAllowance and stay within the broker's
	// transaction.max.timeout.ms.
	TxnTimeout time.Duration
	// RestartAllowance is the time a failed task may take to restart and
	// resume its pre-committed transactions (restart backoff, restore,
	// broker round trips). The restart backoff is capped at half of it.
	// Default 30s.
	RestartAllowance time.Duration
	// Start is where a task without a checkpoint starts reading: earliest
	// (default), latest, or an RFC 3339 timestamp.
	Start string
	// DeadLetter is the topic for bad input records: those that fail to
	// decode, and those whose key belongs to another task (Partitioner).
	// It must exist.
	DeadLetter string
	// OnDecodeError is what becomes of a bad input record: dead-letter or
	// fail. Default: dead-letter when DeadLetter is set, fail otherwise.
	OnDecodeError string
	// Epoch is the fencing epoch of a worker with static Tasks, written into
	// its manifests; it must be larger than that of every earlier owner of
	// those tasks. Default 0: allocated from checkpoint storage at start
	// (checkpoint.NextEpoch), which guarantees that. Group-assigned workers
	// get an epoch per rebalance the same way and refuse this setting.
	Epoch int64
	// LayoutCheckInterval is how often a worker compares the layout of the
	// job's topics (partition counts, topic ids) with the layout the job
	// recorded when it first started; it also compares at every start and
	// rebalance. A difference stops the job on the worker: a changed
	// layout is never processed. Default 30s; at least 100ms.
	LayoutCheckInterval time.Duration
	// HTTPAddr serves the status page (/), /metrics (Prometheus), /healthz
	// and /readyz. Default 127.0.0.1:9464; if that default is taken (a
	// second worker on the host), any free port on 127.0.0.1 (logged).
	// Port 0 picks a free port; "off" serves nothing.
	HTTPAddr string
	// LogLevel is debug, info (default), warn or error.
	LogLevel string
}

// DefaultConfig returns the defaults of every setting.
func DefaultConfig() Config {
	return Config{
		Brokers:           []string{"127.0.0.1:9092"},
		Checkpoints:       "file://" + filepath.Join(os.TempDir(), "weir-checkpoints"),
		Interval:          time.Second,
		CheckpointTimeout: 30 * time.Second,
		TolerableFailures: 3,
		StateBackend:      stateBackendPebble,
		StateMemtableSize: 64 << 20,
		StateCacheSize:    64 << 20,
		StateDeltaMemory:  1 << 20,
		Memory:            DefaultMemory(),
		Delivery:          string(sink.ExactlyOnce),
		Compression:       "none",
		TxnTimeout:        60 * time.Second,
		RestartAllowance:  30 * time.Second,
		Start:             string(source.StartEarliest),
		Partitioner:       partition.Murmur2.String(),
		SessionTimeout:    10 * time.Second,
		HeartbeatInterval: time.Second,
		RebalanceTimeout:  time.Minute,
		HandoffTimeout:    20 * time.Second,
		HTTPAddr:          DefaultHTTPAddr,
		StateCleanupDelay: 10 * time.Minute,
		LogLevel:          "info",

		LayoutCheckInterval: 30 * time.Second,
	}
}

// DefaultHTTPAddr is where a worker serves its status page and metrics
// unless told otherwise.
const DefaultHTTPAddr = "127.0.0.1:9464"

// State backends of --state-backend.
const (
	stateBackendPebble = "pebble"
	stateBackendMemory = "memory"
)

// minLayoutCheckInterval bounds how often a worker asks for the metadata
// of the job's topics.
const minLayoutCheckInterval = 100 * time.Millisecond

// maxMemtableSize is Pebble's limit (state.PebbleOptions refuses 4 GiB).
const maxMemtableSize = 4<<30 - 1

var validName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// ValidName reports whether name can name a job instance (--name): letters,
// digits, '.', '_' or '-'.
func ValidName(name string) bool { return validName.MatchString(name) && len(name) <= 200 }

// Validate reports every bad setting, joined, each naming its flag.
func (c *Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if c.Job != "" && !validName.MatchString(c.Job) {
		bad("job", "%q, want letters, digits, '.', '_' or '-'", c.Job)
	}
	if n := c.name(); n != "" && (!validName.MatchString(n) || len(n) > 200) {
		bad("name", "%q, want letters, digits, '.', '_' or '-' (at most 200)", n)
	}
	errs = append(errs, cli.CheckBrokers(c.Brokers)...)
	if err := c.Security.Validate(); err != nil {
		errs = append(errs, err)
	}
	for name, t := range c.Topics {
		if name == "" || t == "" {
			bad("topic", "%q=%q, want NAME=TOPIC, both set", name, t)
		}
	}
	if c.Input != "" && c.Input == c.Output {
		bad("output", "%q is also the input topic", c.Output)
	}
	if _, err := partition.Parse(c.Partitioner); err != nil {
		bad("partitioner", "%q, want %s (the partitioner of the input's producers)", c.Partitioner, partition.Names())
	}
	seen := map[int]bool{}
	for _, t := range c.Tasks {
		if t < 0 {
			bad("tasks", "%d is negative", t)
		}
		if seen[t] {
			bad("tasks", "%d listed twice", t)
		}
		seen[t] = true
	}
	if err := CheckCheckpointsURI(c.Checkpoints); err != nil {
		bad("checkpoints", "%v", err)
	}
	switch c.StateBackend {
	case stateBackendPebble:
		if c.StateMemtableSize <= 0 || c.StateMemtableSize > maxMemtableSize {
			bad("state-memtable-size", "%d, want more than 0 and less than 4GiB", c.StateMemtableSize)
		}
		if c.StateCacheSize <= 0 {
			bad("state-cache-size", "%d, want more than 0", c.StateCacheSize)
		}
		if c.StateDeltaMemory < 0 {
			bad("state-delta-memory", "%d, want 0 or more", c.StateDeltaMemory)
		}
	case stateBackendMemory:
	default:
		bad("state-backend", "%q, want pebble or memory", c.StateBackend)
	}
	if err := c.Memory.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Interval <= 0 {
		bad("interval", "must be > 0, got %v", c.Interval)
	}
	if c.CheckpointTimeout <= 0 {
		bad("checkpoint-timeout", "must be > 0, got %v", c.CheckpointTimeout)
	}
	if c.MinPause < 0 {
		bad("min-pause", "must not be negative, got %v", c.MinPause)
	}
	if c.TolerableFailures < 0 {
		bad("tolerable-failures", "must not be negative, got %d", c.TolerableFailures)
	}
	if c.RestartAllowance < 0 {
		bad("restart-allowance", "must not be negative, got %v", c.RestartAllowance)
	}
	d, err := sink.ParseDelivery(c.Delivery)
	if err != nil {
		bad("delivery", "%q, want exactly-once, at-least-once or none", c.Delivery)
	}
	if _, err := sink.ParseCompression(c.Compression); err != nil {
		bad("compression", "%v", err)
	}
	if d == sink.ExactlyOnce {
		if c.PoolSize < 0 {
			bad("pool-size", "must not be negative, got %d", c.PoolSize)
		} else if c.TolerableFailures >= 0 {
			if err := sink.CheckPoolSize(c.poolSize(), c.TolerableFailures); err != nil {
				bad("pool-size", "%v (flags --pool-size, --tolerable-failures)", err)
			}
		}
		switch {
		case c.TxnTimeout < time.Second:
			bad("txn-timeout", "%v, want at least 1s", c.TxnTimeout)
		case c.Interval > 0 && c.TolerableFailures >= 0 && c.RestartAllowance >= 0:
			// Checkpoints start at most every --interval and at least
			// --min-pause after the last one ended: a transaction spans
			// the longer of the two.
			if err := sink.CheckTimeout(c.TxnTimeout, max(c.Interval, c.MinPause), c.TolerableFailures, c.RestartAllowance); err != nil {
				bad("txn-timeout", "%v (flags --txn-timeout, --interval, --min-pause, --tolerable-failures, --restart-allowance)", err)
			}
		}
	}
	if _, _, err := c.start(); err != nil {
		bad("start", "%v", err)
	}
	switch c.OnDecodeError {
	case "":
	case string(source.DeadLetter):
		if c.DeadLetter == "" {
			bad("on-decode-error", "dead-letter needs --dead-letter TOPIC")
		}
	case string(source.Fail):
		if c.DeadLetter != "" {
			bad("dead-letter", "%q set, but --on-decode-error is fail and would never use it", c.DeadLetter)
		}
	default:
		bad("on-decode-error", "%q, want dead-letter or fail", c.OnDecodeError)
	}
	if c.DeadLetter != "" && (c.DeadLetter == c.Input || c.DeadLetter == c.Output) {
		bad("dead-letter", "%q is also the input or output topic", c.DeadLetter)
	}
	switch {
	case c.Epoch < 0:
		bad("epoch", "must not be negative, got %d", c.Epoch)
	case c.Epoch != 0 && len(c.Tasks) == 0:
		bad("epoch", "%d set without --tasks: group-assigned workers get their epoch from the group", c.Epoch)
	}
	if len(c.Tasks) == 0 {
		c.validateGroup(bad)
	}
	if c.StateCleanupDelay < 0 {
		bad("state-cleanup-delay", "must not be negative, got %v", c.StateCleanupDelay)
	}
	if c.LayoutCheckInterval < minLayoutCheckInterval {
		bad("layout-check-interval", "%v, want at least %v (each check asks the brokers for the topics' metadata)", c.LayoutCheckInterval, minLayoutCheckInterval)
	}
	if c.HTTPAddr != "" && c.HTTPAddr != "off" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			bad("http-addr", "%q: %v (want host:port or off)", c.HTTPAddr, err)
		}
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("log-level", "%v", err)
	}
	return errors.Join(errs...)
}

// Warnings are settings that are allowed but risky.
func (c *Config) Warnings() []string {
	var w []string
	if c.delivery() == sink.ExactlyOnce && c.TxnTimeout <= c.CheckpointTimeout+c.Interval {
		w = append(w, fmt.Sprintf("--txn-timeout %v is not longer than --checkpoint-timeout %v + --interval %v: "+
			"a checkpoint that runs into its timeout can lose its transaction to the broker's timeout, and the task then "+
			"restores an earlier checkpoint", c.TxnTimeout, c.CheckpointTimeout, c.Interval))
	}
	return w
}

// validateGroup checks the consumer group's timeouts.
func (c *Config) validateGroup(bad func(flag, format string, args ...any)) {
	if c.SessionTimeout < time.Second {
		bad("session-timeout", "%v, want at least 1s (brokers refuse less than group.min.session.timeout.ms, 6s by default)", c.SessionTimeout)
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval*3 > c.SessionTimeout {
		bad("heartbeat-interval", "%v, want more than 0 and at most a third of --session-timeout %v", c.HeartbeatInterval, c.SessionTimeout)
	}
	if c.RebalanceTimeout < time.Second {
		bad("rebalance-timeout", "%v, want at least 1s", c.RebalanceTimeout)
	}
	if c.HandoffTimeout <= 0 || c.HandoffTimeout >= c.RebalanceTimeout {
		bad("handoff-timeout", "%v, want more than 0 and less than --rebalance-timeout %v", c.HandoffTimeout, c.RebalanceTimeout)
	}
}

// Group is the consumer group the job's workers join: the job instance name.
func (c *Config) Group() string { return c.name() }

func (c *Config) name() string {
	if c.Name == "" {
		return c.Job
	}
	return c.Name
}

func (c *Config) stateDir() string {
	if c.StateDir != "" {
		return c.StateDir
	}
	return filepath.Join(os.TempDir(), "weir-state", c.name())
}

func (c *Config) poolSize() int {
	if c.PoolSize == 0 {
		return sink.PoolSizeFor(c.TolerableFailures)
	}
	return c.PoolSize
}

func (c *Config) delivery() sink.Delivery {
	d, _ := sink.ParseDelivery(c.Delivery)
	return d
}

// start parses Start into the source's setting.
func (c *Config) start() (source.Start, time.Time, error) {
	switch s := strings.ToLower(strings.TrimSpace(c.Start)); s {
	case string(source.StartEarliest), string(source.StartLatest):
		return source.Start(s), time.Time{}, nil
	}
	ts, err := time.Parse(time.RFC3339, c.Start)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%q, want earliest, latest or an RFC 3339 time (2006-01-02T15:04:05Z)", c.Start)
	}
	return source.StartTimestamp, ts, nil
}

// flags binds c's fields to fs; the values in c are the defaults.
func (c *Config) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.File, "config", c.File, "YAML settings file, keys are these flag names (flags and WEIR_ variables win over it)")
	fs.StringVar(&c.Job, "job", c.Job, "job to run, by name (default: the binary's only job)")
	fs.StringVar(&c.Name, "name", c.Name, "job instance name: transactional id prefix, checkpoint path, lag group `<name>-lag` (default: --job)")
	fs.Var(cli.List{V: &c.Brokers}, "brokers", "Kafka bootstrap addresses, comma-separated")
	c.Security.RegisterFlags(fs)
	fs.Var(topicMap{m: &c.Topics}, "topic", "`NAME=TOPIC`: read or write TOPIC where the job declares the topic NAME (repeated, or comma-separated)")
	fs.StringVar(&c.Input, "input", c.Input, "the topic of a job that reads one: overrides the job's")
	fs.StringVar(&c.Output, "output", c.Output, "the topic of a job that writes one: overrides the job's")
	fs.StringVar(&c.Partitioner, "partitioner", c.Partitioner, "the partitioner the input topic's producers used, which every KeyBy checks each record's key against: "+
		"murmur2 (Kafka's Java client, Kafka Streams, franz-go), crc32 (librdkafka's default consistent_random: confluent-kafka-go, -python, -dotnet) or fnv1a (Sarama's default)")
	fs.Var(cli.Ints{V: &c.Tasks}, "tasks", "static tasks (input partitions) to run, comma-separated, without the consumer group (default: the group assigns them)")
	fs.DurationVar(&c.SessionTimeout, "session-timeout", c.SessionTimeout, "group session timeout: a silent worker's tasks move after this")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", c.HeartbeatInterval, "group heartbeat interval")
	fs.DurationVar(&c.RebalanceTimeout, "rebalance-timeout", c.RebalanceTimeout, "time the group waits for workers to rejoin in a rebalance")
	fs.DurationVar(&c.HandoffTimeout, "handoff-timeout", c.HandoffTimeout, "bound on stopping a task given up (final checkpoint and commit if in time)")
	fs.StringVar(&c.Checkpoints, "checkpoints", c.Checkpoints, "checkpoint storage: file:///path, s3://bucket/prefix[?region=R&endpoint=URL&path_style=true] (credentials, AWS_REGION and AWS_ENDPOINT_URL_S3 as the AWS SDK reads them) or memory (tests)")
	fs.DurationVar(&c.Interval, "interval", c.Interval, "checkpoint interval")
	fs.DurationVar(&c.CheckpointTimeout, "checkpoint-timeout", c.CheckpointTimeout, "abort a checkpoint not complete within this")
	fs.DurationVar(&c.MinPause, "min-pause", c.MinPause, "least time between the end of one checkpoint and the next")
	fs.IntVar(&c.TolerableFailures, "tolerable-failures", c.TolerableFailures, "consecutive failed checkpoints tolerated before the task fails")
	fs.StringVar(&c.StateBackend, "state-backend", c.StateBackend, "keyed state: pebble (local Pebble stores, incremental checkpoints) or memory (full checkpoints; tests, small state)")
	fs.Var(cli.Bytes{V: &c.StateMemtableSize}, "state-memtable-size", "Pebble memtable size per store, bytes or with K, M, G, KiB, MiB, GiB (binary); bounds the background flush of each checkpoint")
	fs.Var(cli.Bytes{V: &c.StateCacheSize}, "state-cache-size", "Pebble block cache shared by the worker's stores (bytes, or with K, M, G, KiB, MiB, GiB)")
	fs.Var(cli.Bytes{V: &c.StateDeltaMemory}, "state-delta-memory", "per Pebble store, delta checkpoints held in memory until uploaded, more go through the local disk (bytes, or with K, M, G, KiB, MiB, GiB); 0: every delta does")
	c.Memory.RegisterFlags(fs)
	fs.DurationVar(&c.StateCleanupDelay, "state-cleanup-delay", c.StateCleanupDelay, "delete the local state of a task that left this worker after this long (0: keep it)")
	fs.BoolVar(&c.AllowNonRestoredState, "allow-non-restored-state", c.AllowNonRestoredState, "restore checkpoints with state or source positions of operators the job no longer has, dropping them (a renamed source reads from --start)")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "local state directory, a cache of the checkpoints (default: $TMPDIR/weir-state/<name>)")
	fs.StringVar(&c.Delivery, "delivery", c.Delivery, "sink guarantee: exactly-once, at-least-once or none")
	fs.StringVar(&c.Compression, "compression", c.Compression, "compression of the batches written to the output and repartition topics: none, gzip, snappy, lz4 or zstd")
	fs.IntVar(&c.PoolSize, "pool-size", c.PoolSize, "transactional ids per task (exactly-once; at least 2 × tolerable failures + 3; default: that)")
	fs.DurationVar(&c.TxnTimeout, "txn-timeout", c.TxnTimeout, "sink transaction timeout (exactly-once; > interval × (tolerable failures + 1) + restart allowance)")
	fs.DurationVar(&c.RestartAllowance, "restart-allowance", c.RestartAllowance, "time a failed task may take to restart and resume its transactions")
	fs.StringVar(&c.Start, "start", c.Start, "where a task without checkpoint starts: earliest, latest or an RFC 3339 time")
	fs.StringVar(&c.DeadLetter, "dead-letter", c.DeadLetter, "topic for bad input records: those that fail to decode or whose key belongs to another task (must exist)")
	fs.StringVar(&c.OnDecodeError, "on-decode-error", c.OnDecodeError, "what becomes of a bad input record: dead-letter or fail (default: dead-letter with --dead-letter, else fail)")
	fs.Int64Var(&c.Epoch, "epoch", c.Epoch, "fencing epoch with --tasks, must grow across owners (default: allocated from checkpoint storage)")
	fs.DurationVar(&c.LayoutCheckInterval, "layout-check-interval", c.LayoutCheckInterval, "how often to compare the topics' partition counts and ids with the job's layout record (also at start and every rebalance); a change stops the job")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "serve the status page, /metrics, /healthz and /readyz at host:port (port 0: any free port; off: none)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
}

// RegisterFlags binds c's fields to fs; the values in c are the defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) { c.flags(fs) }

// Parse builds a worker configuration from the defaults, the settings
// file (--config or WEIR_CONFIG), the environment (lookup) and args, in
// that order, and validates it. Errors are cli.UsageErrors naming the
// setting; -h prints the flags to stderr and returns flag.ErrHelp.
func Parse(args []string, lookup func(string) (string, bool), stderr io.Writer) (Config, error) {
	c := DefaultConfig()
	fs := cli.NewFlagSet("run", "Run a job's worker: read --input, write --output, checkpoint to --checkpoints.", stderr)
	c.flags(fs)
	if err := cli.ParseWithFile(fs, args, lookup, "config"); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, cli.UsageError{Err: err}
	}
	return c, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q, want debug, info, warn or error", s)
	}
	return l, nil
}

// CheckCheckpointsURI checks a checkpoint storage URI without opening it
// (checkpoint.Open does, and an S3 one asks the bucket).
func CheckCheckpointsURI(uri string) error {
	switch {
	case uri == "memory" || uri == "memory://":
		return nil
	case strings.HasPrefix(uri, "file://"):
		if strings.TrimPrefix(uri, "file://") == "" {
			return fmt.Errorf("%q: file:// needs a path, as in file:///var/lib/weir/checkpoints", uri)
		}
		return nil
	case strings.HasPrefix(uri, "s3://"):
		// The parser's errors quote the URI already.
		_, err := checkpoint.S3OptionsFromURI(uri)
		return err
	}
	return fmt.Errorf("%q, want file:///path, s3://bucket/prefix or memory", uri)
}

// topicMap is the value of --topic: NAME=TOPIC pairs, comma-separated,
// merged over repeated flags.
type topicMap struct{ m *map[string]string }

func (t topicMap) String() string {
	if t.m == nil {
		return ""
	}
	var pairs []string
	for name, topic := range *t.m {
		pairs = append(pairs, name+"="+topic)
	}
	slices.Sort(pairs)
	return strings.Join(pairs, ",")
}

func (t topicMap) Set(v string) error {
	for _, pair := range strings.Split(v, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		name, topic, ok := strings.Cut(pair, "=")
		if !ok || name == "" || topic == "" {
			return fmt.Errorf("%q, want NAME=TOPIC", pair)
		}
		if *t.m == nil {
			*t.m = map[string]string{}
		}
		(*t.m)[name] = topic
	}
	return nil
}
