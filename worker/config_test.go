package worker

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/cli"
)

func validConfig() Config {
	c := DefaultConfig()
	c.Input, c.Output = "in", "out"
	return c
}

func TestDefaultConfigIsValid(t *testing.T) {
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults with input and output: %v", err)
	}
	if got, want := c.poolSize(), 2*c.TolerableFailures+3; got != want {
		t.Errorf("default pool size %d, want 2 × tolerable failures + 3 = %d", got, want)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("the defaults warn: %q", w)
	}
	// 60s transactions against 1m checkpoint timeouts: allowed, warned.
	c.CheckpointTimeout = time.Minute
	if w := c.Warnings(); len(w) != 1 || !strings.Contains(w[0], "--checkpoint-timeout") {
		t.Errorf("warnings of --checkpoint-timeout 1m, --txn-timeout 60s: %q", w)
	}
}

func TestValidateNamesTheBadSetting(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   []string
	}{
		{"interval", func(c *Config) { c.Interval = 0 }, []string{"--interval: must be > 0"}},
		{"negative interval", func(c *Config) { c.Interval = -time.Second }, []string{"--interval: must be > 0"}},
		{"checkpoint timeout", func(c *Config) { c.CheckpointTimeout = 0 }, []string{"--checkpoint-timeout: must be > 0"}},
		{"min pause", func(c *Config) { c.MinPause = -1 }, []string{"--min-pause: must not be negative"}},
		{"tolerable failures", func(c *Config) { c.TolerableFailures = -1 }, []string{"--tolerable-failures: must not be negative"}},
		{"job", func(c *Config) { c.Job = "a job" }, []string{`--job: "a job"`}},
		{"name", func(c *Config) { c.Name = "a b" }, []string{`--name: "a b"`}},
		{"topic without a target", func(c *Config) { c.Topics = map[string]string{"orders": ""} }, []string{`--topic: "orders"=""`}},
		{"same topics", func(c *Config) { c.Output = c.Input }, []string{"--output: \"in\" is also the input topic"}},
		{"no brokers", func(c *Config) { c.Brokers = nil }, []string{"--brokers: required"}},
		{"bad broker", func(c *Config) { c.Brokers = []string{"localhost"} }, []string{`--brokers: "localhost" is not host:port`}},
		{"tasks", func(c *Config) { c.Tasks = []int{0, -1, 0} }, []string{"--tasks: -1 is negative", "--tasks: 0 listed twice"}},
		{"checkpoints", func(c *Config) { c.Checkpoints = "s4://x" }, []string{`--checkpoints: "s4://x", want file:///path, s3://bucket/prefix or memory`}},
		{"checkpoints file without path", func(c *Config) { c.Checkpoints = "file://" }, []string{`--checkpoints: "file://": file:// needs a path`}},
		{"checkpoints s3 without bucket", func(c *Config) { c.Checkpoints = "s3:///prefix" }, []string{`--checkpoints: checkpoint storage "s3:///prefix": s3:// needs a bucket`}},
		{"checkpoints s3 setting", func(c *Config) { c.Checkpoints = "s3://b/p?regoin=eu-west-1" }, []string{`--checkpoints: checkpoint storage "s3://b/p?regoin=eu-west-1": unknown setting "regoin"`}},
		{"checkpoints s3 endpoint", func(c *Config) { c.Checkpoints = "s3://b/p?endpoint=minio:9000" }, []string{`--checkpoints: checkpoint storage "s3://b/p?endpoint=minio:9000": endpoint "minio:9000"`}},
		{"checkpoints s3 credentials", func(c *Config) { c.Checkpoints = "s3://key:secret@b/p" }, []string{"--checkpoints: ", "put credentials in the environment"}},
		{"state backend", func(c *Config) { c.StateBackend = "rocksdb" }, []string{`--state-backend: "rocksdb", want pebble or memory`}},
		{"memtable size", func(c *Config) { c.StateMemtableSize = 0 }, []string{"--state-memtable-size: 0, want more than 0 and less than 4GiB"}},
		{"memtable too big", func(c *Config) { c.StateMemtableSize = 4 << 30 }, []string{"--state-memtable-size: 4294967296"}},
		{"cache size", func(c *Config) { c.StateCacheSize = -1 }, []string{"--state-cache-size: -1, want more than 0"}},
		{"delta memory", func(c *Config) { c.StateDeltaMemory = -1 }, []string{"--state-delta-memory: -1, want 0 or more"}},
		{"delivery", func(c *Config) { c.Delivery = "twice" }, []string{`--delivery: "twice"`}},
		{"pool size", func(c *Config) { c.PoolSize = 4 }, []string{"--pool-size: sink pool size 4 is too small", "--tolerable-failures"}},
		{"txn timeout", func(c *Config) { c.TxnTimeout = 20 * time.Second }, []string{
			"--txn-timeout: sink transaction timeout 20s is too short", "--interval", "--tolerable-failures", "--restart-allowance",
		}},
		{"txn timeout unit", func(c *Config) { c.TxnTimeout = time.Millisecond }, []string{"--txn-timeout: 1ms, want at least 1s"}},
		// A transaction spans --min-pause at least, past --interval here.
		{"txn timeout min pause", func(c *Config) { c.MinPause = 2 * time.Minute }, []string{
			"--txn-timeout: sink transaction timeout 1m0s is too short", "--min-pause",
		}},
		{"start", func(c *Config) { c.Start = "yesterday" }, []string{`--start: "yesterday"`}},
		{"partitioner", func(c *Config) { c.Partitioner = "consistent_random" }, []string{`--partitioner: "consistent_random", want murmur2, crc32 or fnv1a`}},
		{"dead letter needs topic", func(c *Config) { c.OnDecodeError = "dead-letter" }, []string{"--on-decode-error: dead-letter needs --dead-letter"}},
		{"dead letter unused", func(c *Config) { c.OnDecodeError, c.DeadLetter = "fail", "dlq" }, []string{"--dead-letter: \"dlq\" set"}},
		{"on decode error", func(c *Config) { c.OnDecodeError = "ignore" }, []string{`--on-decode-error: "ignore"`}},
		{"dead letter is input", func(c *Config) { c.DeadLetter = "in" }, []string{"--dead-letter: \"in\" is also"}},
		{"epoch", func(c *Config) { c.Epoch = -1 }, []string{"--epoch: must not be negative"}},
		{"epoch with the group", func(c *Config) { c.Epoch = 7 }, []string{"--epoch: 7 set without --tasks"}},
		{"http addr", func(c *Config) { c.HTTPAddr = "9090" }, []string{`--http-addr: "9090"`}},
		{"session timeout", func(c *Config) { c.SessionTimeout = 10 * time.Millisecond }, []string{"--session-timeout: 10ms, want at least 1s"}},
		{"heartbeat interval", func(c *Config) { c.HeartbeatInterval = 5 * time.Second }, []string{"--heartbeat-interval: 5s, want more than 0 and at most a third of --session-timeout 10s"}},
		{"rebalance timeout", func(c *Config) { c.RebalanceTimeout = 0 }, []string{"--rebalance-timeout: 0s, want at least 1s"}},
		{"handoff timeout", func(c *Config) { c.HandoffTimeout = 2 * time.Minute }, []string{"--handoff-timeout: 2m0s, want more than 0 and less than --rebalance-timeout 1m0s"}},
		{"handoff timeout zero", func(c *Config) { c.HandoffTimeout = 0 }, []string{"--handoff-timeout: 0s"}},
		{"log level", func(c *Config) { c.LogLevel = "loud" }, []string{`--log-level: "loud"`}},
		{"layout check interval", func(c *Config) { c.LayoutCheckInterval = 0 }, []string{"--layout-check-interval: 0s, want at least 100ms"}},
		{"layout check interval too short", func(c *Config) { c.LayoutCheckInterval = time.Millisecond }, []string{"--layout-check-interval: 1ms, want at least 100ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.change(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestValidateAcceptsStorageAndBackends(t *testing.T) {
	for _, tc := range []struct {
		checkpoints, backend string
	}{
		{"s3://weir-checkpoints/", "pebble"},
		{"s3://bucket/some/prefix?region=eu-west-1&endpoint=http://127.0.0.1:9000&path_style=true", "pebble"},
		{"file:///var/lib/weir/checkpoints", "memory"},
		{"memory", "memory"},
	} {
		c := validConfig()
		c.Checkpoints, c.StateBackend = tc.checkpoints, tc.backend
		if err := c.Validate(); err != nil {
			t.Errorf("--checkpoints %s --state-backend %s: %v", tc.checkpoints, tc.backend, err)
		}
	}
	// Pebble's sizes do not matter to the memory backend.
	c := validConfig()
	c.StateBackend, c.StateMemtableSize, c.StateCacheSize, c.StateDeltaMemory = "memory", 0, 0, -1
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	if d := DefaultConfig(); d.StateBackend != "pebble" || d.Partitioner != "murmur2" {
		t.Errorf("default state backend %q, want pebble; default partitioner %q, want murmur2 (Kafka's)", d.StateBackend, d.Partitioner)
	}
}

func TestValidateAcceptsOtherDeliveriesWithoutTransactionChecks(t *testing.T) {
	c := validConfig()
	c.Delivery, c.TxnTimeout, c.PoolSize = "at-least-once", time.Second, 3
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Start = "2026-01-02T15:04:05Z"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func env(kv ...string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == k {
				return kv[i+1], true
			}
		}
		return "", false
	}
}

func TestFlagsAndEnvironment(t *testing.T) {
	var stderr bytes.Buffer
	c, err := Parse(
		[]string{"--input", "numbers", "--interval", "250ms", "--tasks", "0,2", "--brokers", "a:1,b:2"},
		env("WEIR_OUTPUT", "counts", "WEIR_INTERVAL", "5s", "WEIR_TOLERABLE_FAILURES", "1",
			"WEIR_CHECKPOINT_TIMEOUT", "30s", "WEIR_ON_DECODE_ERROR", "dead-letter", "WEIR_DEAD_LETTER", "dlq",
			"WEIR_EPOCH", "42", "WEIR_HANDOFF_TIMEOUT", "7s", "WEIR_START", "latest", "WEIR_STATE_BACKEND", "memory", "WEIR_STATE_MEMTABLE_SIZE", "8MiB",
			"WEIR_STATE_CACHE_SIZE", "1048576", "WEIR_CHECKPOINTS", "s3://ckpt/weir?region=eu-west-1", "WEIR_LAYOUT_CHECK_INTERVAL", "2s", "WEIR_PARTITIONER", "crc32"),
		&stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if c.Input != "numbers" || c.Output != "counts" {
		t.Errorf("topics %q -> %q", c.Input, c.Output)
	}
	if c.Interval != 250*time.Millisecond {
		t.Errorf("interval %v: the flag must win over WEIR_INTERVAL", c.Interval)
	}
	if c.TolerableFailures != 1 || c.CheckpointTimeout != 30*time.Second || c.Epoch != 42 || c.Start != "latest" || c.HandoffTimeout != 7*time.Second ||
		c.LayoutCheckInterval != 2*time.Second {
		t.Errorf("environment not applied: %+v", c)
	}
	if c.StateBackend != "memory" || c.StateMemtableSize != 8<<20 || c.StateCacheSize != 1<<20 || c.Checkpoints != "s3://ckpt/weir?region=eu-west-1" {
		t.Errorf("state settings from the environment: backend %q memtable %d cache %d checkpoints %q",
			c.StateBackend, c.StateMemtableSize, c.StateCacheSize, c.Checkpoints)
	}
	if c.OnDecodeError != "dead-letter" || c.DeadLetter != "dlq" || c.Partitioner != "crc32" {
		t.Errorf("bad record settings: %q %q, partitioner %q", c.OnDecodeError, c.DeadLetter, c.Partitioner)
	}
	if !slices.Equal(c.Tasks, []int{0, 2}) || !slices.Equal(c.Brokers, []string{"a:1", "b:2"}) {
		t.Errorf("lists: tasks %v brokers %v", c.Tasks, c.Brokers)
	}
	if c.Job != "" || c.Delivery != "exactly-once" || c.HTTPAddr != DefaultHTTPAddr || c.SessionTimeout != 10*time.Second {
		t.Errorf("defaults: job %q delivery %q http %q session timeout %v", c.Job, c.Delivery, c.HTTPAddr, c.SessionTimeout)
	}
	if d := DefaultConfig().LayoutCheckInterval; d != 30*time.Second {
		t.Errorf("default --layout-check-interval %v, want 30s", d)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"bad env value", []string{"--input", "a", "--output", "b"}, []string{"WEIR_INTERVAL", "soon"}, `WEIR_INTERVAL="soon" (--interval)`},
		{"bad flag value", []string{"--input", "a", "--output", "b", "--tasks", "one"}, nil, `"one" is not an integer`},
		{"unknown flag", []string{"--inptu", "a"}, nil, "flag provided but not defined: -inptu"},
		{"stray argument", []string{"--input", "a", "--output", "b", "extra"}, nil, "unexpected arguments: extra"},
		{"invalid setting", []string{"--input", "a", "--output", "b"}, []string{"WEIR_INTERVAL", "0s"}, "--interval: must be > 0"},
		{"bad size", []string{"--input", "a", "--output", "b", "--state-cache-size", "lots"}, nil, `"lots" is not a size`},
		{"bad size from env", []string{"--input", "a", "--output", "b"}, []string{"WEIR_STATE_MEMTABLE_SIZE", "64MB"}, `WEIR_STATE_MEMTABLE_SIZE="64MB" (--state-memtable-size): "64MB": unknown unit "MB"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			_, err := Parse(tc.args, env(tc.env...), &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error with %q, got %v", tc.want, err)
			}
			if _, ok := err.(cli.UsageError); !ok {
				t.Errorf("%T is not a usage error (exit 2)", err)
			}
		})
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "weir.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigFile: a settings file fills what the environment and the
// command line leave, with the flag names as keys; lists may be YAML lists.
func TestConfigFile(t *testing.T) {
	path := writeFile(t, `
input: numbers
output: counts
brokers: [k1:9092, k2:9092]
interval: 250ms
state-memtable-size: 8MiB
tasks: [0, 2]
http-addr: off
handoff-timeout: 5s
layout-check-interval: 1s
`)
	var stderr bytes.Buffer
	c, err := Parse([]string{"--config", path, "--interval", "2s"}, env("WEIR_OUTPUT", "from-env", "WEIR_HANDOFF_TIMEOUT", "7s"), &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if c.Input != "numbers" || !slices.Equal(c.Brokers, []string{"k1:9092", "k2:9092"}) || c.StateMemtableSize != 8<<20 ||
		!slices.Equal(c.Tasks, []int{0, 2}) || c.HTTPAddr != "off" || c.LayoutCheckInterval != time.Second {
		t.Errorf("file settings not applied: %+v", c)
	}
	if c.Interval != 2*time.Second {
		t.Errorf("interval %v: the flag must win over the file", c.Interval)
	}
	if c.Output != "from-env" || c.HandoffTimeout != 7*time.Second {
		t.Errorf("output %q, handoff timeout %v: the environment must win over the file", c.Output, c.HandoffTimeout)
	}
	// WEIR_CONFIG names the file too.
	c, err = Parse(nil, env("WEIR_CONFIG", path), &stderr)
	if err != nil || c.Input != "numbers" || c.Interval != 250*time.Millisecond {
		t.Errorf("WEIR_CONFIG: %v, %+v", err, c)
	}
}

func TestConfigFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"unknown key", "input: a\noutput: b\ninptu: c\n", []string{`unknown setting "inptu"`}},
		{"bad value", "input: a\noutput: b\ninterval: soon\n", []string{"interval", `"soon"`}},
		{"invalid setting names the flag", "input: a\noutput: b\ninterval: 0s\n", []string{"--interval: must be > 0"}},
		{"not a mapping", "- a\n- b\n", []string{"not a YAML mapping of settings"}},
		{"nested value", "input: a\noutput: b\nbrokers: {a: b}\n", []string{"brokers", "want a value or a list of values"}},
		{"the file names itself", "config: other.yaml\ninput: a\noutput: b\n", []string{`unknown setting "config"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.body)
			_, err := Parse([]string{"--config", path}, env(), &bytes.Buffer{})
			if err == nil {
				t.Fatal("accepted")
			}
			if _, ok := err.(cli.UsageError); !ok {
				t.Errorf("%T is not a usage error (exit 2)", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
	_, err := Parse([]string{"--config", "/nonexistent/weir.yaml"}, env(), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--config: open /nonexistent/weir.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

// TestTopicFlag: --topic points the job's topics elsewhere, repeated or
// comma-separated, from the command line or WEIR_TOPIC; a pair without
// its '=' is refused naming the flag.
func TestTopicFlag(t *testing.T) {
	var stderr bytes.Buffer
	c, err := Parse([]string{"--topic", "orders=prod.orders", "--topic", "paid=prod.paid, rejects=prod.rejects"}, env(), &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	want := map[string]string{"orders": "prod.orders", "paid": "prod.paid", "rejects": "prod.rejects"}
	if !maps.Equal(c.Topics, want) {
		t.Errorf("topics %v, want %v", c.Topics, want)
	}
	c, err = Parse(nil, env("WEIR_TOPIC", "payments=p2"), &stderr)
	if err != nil || c.Topics["payments"] != "p2" {
		t.Errorf("WEIR_TOPIC: %v %v", c.Topics, err)
	}
	stderr.Reset()
	if _, err := Parse([]string{"--topic", "orders"}, env(), &stderr); err == nil || !strings.Contains(err.Error()+stderr.String(), "topic") {
		t.Errorf("--topic orders (no '='): %v %s", err, stderr.String())
	}
}
