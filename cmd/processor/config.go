package main

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
	"strconv"
	"strings"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/source"
)

// Config is the configuration of `processor run`: one worker process running
// some tasks of one job. Every field is a flag (--name) and an environment
// variable (WEIR_NAME, upper snake case); a flag given on the command line
// wins over the environment, which wins over the default. The defaults are
// those of DefaultConfig.
type Config struct {
	// Job is the job to run: "count" or "balance".
	Job string
	// Name names the job instance: it derives the transactional id prefix
	// ("<name>-<sink operator>"), the checkpoint path (<checkpoints>/<name>/)
	// and the lag group ("<name>-lag"). Default: Job. Two instances that
	// share a broker or a checkpoint storage need different names.
	Name string
	// Brokers are the Kafka bootstrap addresses. Default 127.0.0.1:9092.
	Brokers []string
	// Input and Output are the topics the job reads and writes. Required.
	Input  string
	Output string
	// Tasks are the task indexes (= input partitions) this worker runs.
	// Default: every partition of Input.
	Tasks []int
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
	// StateDir holds local state. Default: $TMPDIR/weir-state/<name>.
	StateDir string
	// Delivery is the sink's guarantee: exactly-once (default),
	// at-least-once or none.
	Delivery string
	// PoolSize is the number of transactional ids per task (exactly-once
	// only), at least TolerableFailures + 3 (sink.CheckPoolSize). Default
	// 0: exactly TolerableFailures + 3 (6 with the default 3).
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
	// DeadLetter is the topic for input records that fail to decode. It
	// must exist.
	DeadLetter string
	// OnDecodeError is dead-letter or fail. Default: dead-letter when
	// DeadLetter is set, fail otherwise.
	OnDecodeError string
	// Epoch is this process's fencing epoch, written into its manifests; it
	// must grow across restarts. Default: time.Now().UnixNano() at start.
	Epoch int64
	// MetricsAddr, if set, serves /metrics (Prometheus) and /healthz
	// there; port 0 picks a free port (logged). Default: off.
	MetricsAddr string
	// LogLevel is debug, info (default), warn or error.
	LogLevel string
}

// DefaultConfig returns the defaults of every setting.
func DefaultConfig() Config {
	return Config{
		Job:               "count",
		Brokers:           []string{"127.0.0.1:9092"},
		Checkpoints:       "file://" + filepath.Join(os.TempDir(), "weir-checkpoints"),
		Interval:          time.Second,
		CheckpointTimeout: time.Minute,
		TolerableFailures: 3,
		StateBackend:      stateBackendPebble,
		StateMemtableSize: 64 << 20,
		StateCacheSize:    64 << 20,
		Delivery:          string(sink.ExactlyOnce),
		TxnTimeout:        60 * time.Second,
		RestartAllowance:  30 * time.Second,
		Start:             string(source.StartEarliest),
		Epoch:             time.Now().UnixNano(),
		LogLevel:          "info",
	}
}

// jobs are the jobs the worker knows.
var jobs = []string{"count", "balance"}

// State backends of --state-backend.
const (
	stateBackendPebble = "pebble"
	stateBackendMemory = "memory"
)

// maxMemtableSize is Pebble's limit (state.PebbleOptions refuses 4 GiB).
const maxMemtableSize = 4<<30 - 1

var validName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// Validate reports every bad setting, joined, each naming its flag.
func (c *Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if !slices.Contains(jobs, c.Job) {
		bad("job", "%q, want one of %s", c.Job, strings.Join(jobs, ", "))
	}
	if n := c.name(); !validName.MatchString(n) || len(n) > 200 {
		bad("name", "%q, want letters, digits, '.', '_' or '-' (at most 200)", n)
	}
	errs = append(errs, checkBrokers(c.Brokers)...)
	if c.Input == "" {
		bad("input", "required: the topic to read")
	}
	if c.Output == "" {
		bad("output", "required: the topic to write")
	}
	if c.Input != "" && c.Input == c.Output {
		bad("output", "%q is also the input topic", c.Output)
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
	if err := checkCheckpointsURI(c.Checkpoints); err != nil {
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
	case stateBackendMemory:
	default:
		bad("state-backend", "%q, want pebble or memory", c.StateBackend)
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
			if err := sink.CheckTimeout(c.TxnTimeout, c.Interval, c.TolerableFailures, c.RestartAllowance); err != nil {
				bad("txn-timeout", "%v (flags --txn-timeout, --interval, --tolerable-failures, --restart-allowance)", err)
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
	if c.Epoch <= 0 {
		bad("epoch", "must be > 0, got %d", c.Epoch)
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			bad("metrics-addr", "%q: %v", c.MetricsAddr, err)
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

func (c *Config) name() string {
	if c.Name == "" {
		return c.Job
	}
	return c.Name
}

func (c *Config) poolSize() int {
	if c.PoolSize == 0 {
		return c.TolerableFailures + sink.MinPoolSize
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

// checkCheckpointsURI checks a checkpoint storage URI without opening it
// (checkpoint.Open does, and an S3 one asks the bucket).
func checkCheckpointsURI(uri string) error {
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

func checkBrokers(brokers []string) []error {
	if len(brokers) == 0 {
		return []error{errors.New("--brokers: required: at least one host:port")}
	}
	var errs []error
	for _, b := range brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			errs = append(errs, fmt.Errorf("--brokers: %q is not host:port", b))
		}
	}
	return errs
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q, want debug, info, warn or error", s)
	}
	return l, nil
}

// --- flags and environment ---------------------------------------------------

// usageError is a bad command line or setting: the process exits with 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(cmd, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: processor %s [flags]\n\n%s\n\nEvery flag can also be set from the environment: --some-flag as WEIR_SOME_FLAG.\n\n", cmd, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// envName is the environment variable of a flag: WEIR_<FLAG_UPPER_SNAKE>.
func envName(flag string) string {
	return "WEIR_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// parseFlags sets flags from the environment (lookup, os.LookupEnv in the
// binary), then from args, so that the command line wins.
func parseFlags(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := lookup(envName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q (--%s): %v", envName(f.Name), v, f.Name, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return usageError{err}
	}
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))}
	}
	return nil
}

// listFlag is a comma-separated list of strings.
type listFlag struct{ v *[]string }

func (l listFlag) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, ",")
}

func (l listFlag) Set(s string) error {
	*l.v = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l.v = append(*l.v, p)
		}
	}
	return nil
}

// intsFlag is a comma-separated list of integers; empty means none.
type intsFlag struct{ v *[]int }

func (l intsFlag) String() string {
	if l.v == nil {
		return ""
	}
	s := make([]string, len(*l.v))
	for i, n := range *l.v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l intsFlag) Set(s string) error {
	*l.v = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("%q is not an integer", p)
		}
		*l.v = append(*l.v, n)
	}
	return nil
}

// bytesFlag is a size in bytes: a plain integer or one with a binary unit
// (64MiB, 64M, 512KiB, 1G).
type bytesFlag struct{ v *int64 }

func (b bytesFlag) String() string {
	if b.v == nil {
		return ""
	}
	n := *b.v
	for _, u := range []struct {
		unit string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.unit
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b bytesFlag) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b.v = n
	return nil
}

func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return r < '0' || r > '9' })
	digits, unit := t, ""
	if i >= 0 {
		digits, unit = t[:i], strings.TrimSpace(t[i:])
	}
	if digits == "" {
		return 0, fmt.Errorf("%q is not a size, want e.g. 67108864, 64MiB or 64M", s)
	}
	mult := int64(1)
	switch strings.ToLower(unit) {
	case "", "b":
	case "k", "kib":
		mult = 1 << 10
	case "m", "mib":
		mult = 1 << 20
	case "g", "gib":
		mult = 1 << 30
	default:
		return 0, fmt.Errorf("%q: unknown unit %q, want bytes or K, M, G, KiB, MiB, GiB", s, unit)
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size, want e.g. 67108864, 64MiB or 64M", s)
	}
	return n * mult, nil
}

// flags binds c's fields to fs; the values in c are the defaults.
func (c *Config) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Job, "job", c.Job, "job to run: "+strings.Join(jobs, " or "))
	fs.StringVar(&c.Name, "name", c.Name, "job instance name: transactional id prefix, checkpoint path, lag group `<name>-lag` (default: --job)")
	fs.Var(listFlag{&c.Brokers}, "brokers", "Kafka bootstrap addresses, comma-separated")
	fs.StringVar(&c.Input, "input", c.Input, "input topic (required)")
	fs.StringVar(&c.Output, "output", c.Output, "output topic (required)")
	fs.Var(intsFlag{&c.Tasks}, "tasks", "tasks (input partitions) to run, comma-separated (default: all partitions of --input)")
	fs.StringVar(&c.Checkpoints, "checkpoints", c.Checkpoints, "checkpoint storage: file:///path, s3://bucket/prefix[?region=R&endpoint=URL&path_style=true] (credentials, AWS_REGION and AWS_ENDPOINT_URL_S3 as the AWS SDK reads them) or memory (tests)")
	fs.DurationVar(&c.Interval, "interval", c.Interval, "checkpoint interval")
	fs.DurationVar(&c.CheckpointTimeout, "checkpoint-timeout", c.CheckpointTimeout, "abort a checkpoint not complete within this")
	fs.DurationVar(&c.MinPause, "min-pause", c.MinPause, "least time between the end of one checkpoint and the next")
	fs.IntVar(&c.TolerableFailures, "tolerable-failures", c.TolerableFailures, "consecutive failed checkpoints tolerated before the task fails")
	fs.StringVar(&c.StateBackend, "state-backend", c.StateBackend, "keyed state: pebble (local Pebble stores, incremental checkpoints) or memory (full checkpoints; tests, small state)")
	fs.Var(bytesFlag{&c.StateMemtableSize}, "state-memtable-size", "Pebble memtable size per store, bytes or with K, M, G, KiB, MiB, GiB (binary); bounds the background flush of each checkpoint")
	fs.Var(bytesFlag{&c.StateCacheSize}, "state-cache-size", "Pebble block cache shared by the worker's stores (bytes, or with K, M, G, KiB, MiB, GiB)")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "local state directory, a cache of the checkpoints (default: $TMPDIR/weir-state/<name>)")
	fs.StringVar(&c.Delivery, "delivery", c.Delivery, "sink guarantee: exactly-once, at-least-once or none")
	fs.IntVar(&c.PoolSize, "pool-size", c.PoolSize, "transactional ids per task (exactly-once; at least tolerable failures + 3; default: that)")
	fs.DurationVar(&c.TxnTimeout, "txn-timeout", c.TxnTimeout, "sink transaction timeout (exactly-once; > interval × (tolerable failures + 1) + restart allowance)")
	fs.DurationVar(&c.RestartAllowance, "restart-allowance", c.RestartAllowance, "time a failed task may take to restart and resume its transactions")
	fs.StringVar(&c.Start, "start", c.Start, "where a task without checkpoint starts: earliest, latest or an RFC 3339 time")
	fs.StringVar(&c.DeadLetter, "dead-letter", c.DeadLetter, "topic for input records that fail to decode (must exist)")
	fs.StringVar(&c.OnDecodeError, "on-decode-error", c.OnDecodeError, "dead-letter or fail (default: dead-letter with --dead-letter, else fail)")
	fs.Int64Var(&c.Epoch, "epoch", c.Epoch, "fencing epoch, must grow across restarts (default: now in Unix nanoseconds)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "serve /metrics and /healthz at host:port (port 0: any free port; default: off)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
}

// parseRunConfig builds the run configuration from args and the environment.
func parseRunConfig(args []string, lookup func(string) (string, bool), stderr io.Writer) (Config, error) {
	c := DefaultConfig()
	fs := newFlagSet("run", "Run tasks of a job: read --input, write --output, checkpoint to --checkpoints.", stderr)
	c.flags(fs)
	if err := parseFlags(fs, args, lookup); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, usageError{err}
	}
	return c, nil
}
