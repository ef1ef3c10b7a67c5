package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/worker"
)

// testCtx bounds a test that talks to Kafka.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// waitCommitted reads topic read_committed until it holds n records.
func waitCommitted(t *testing.T, ctx context.Context, brokers []string, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := 0
	for got < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: %d of %d records committed: %v", topic, got, n, ctx.Err())
		}
		got += fs.NumRecords()
	}
}

// TestCountJobExactlyOnce runs the count job as `processor run` would, on
// two partitions with two tasks, through a stop and a restart with a new
// epoch; a bad record goes to the dead-letter topic. The committed output
// must hold every input record's effect exactly once, with each state
// backend, on file:// and on S3 checkpoints. `checkpoints list` and
// `inspect` then read what the runs left.
func TestCountJobExactlyOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend string
		s3      bool
	}{
		{"pebble state, file checkpoints", "pebble", false},
		{"memory state, file checkpoints", "memory", false},
		{"pebble state, s3 checkpoints", "pebble", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var environ []string
			uri := "file://" + t.TempDir()
			if tc.s3 {
				uri = s3Checkpoints(t)
			}
			if tc.backend != "pebble" { // pebble is the default
				environ = append(environ, "WEIR_STATE_BACKEND", tc.backend)
			}
			environ = append(environ, "WEIR_CHECKPOINTS", uri)
			cfg := runCountJob(t, env(environ...))
			checkCheckpointsCLI(t, cfg, tc.backend)
		})
	}
}

// s3Checkpoints points the AWS SDK at a test bucket the way docker-compose.yml
// configures the worker (AWS_ENDPOINT_URL_S3, AWS_REGION and credentials in
// the environment) and returns the s3:// URI of the test's prefix.
func s3Checkpoints(t *testing.T) string {
	b := testcluster.S3(t)
	t.Setenv("AWS_ENDPOINT_URL_S3", b.Endpoint)
	t.Setenv("AWS_REGION", b.Region)
	if b.AccessKey != "" {
		t.Setenv("AWS_ACCESS_KEY_ID", b.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", b.SecretKey)
	}
	return "s3://" + b.Name + "/" + strings.TrimSuffix(b.Prefix, "/")
}

// runCountJob runs the count job twice over 5001 records (one undecodable)
// with the settings in environ plus the test's topics, and checks the
// verdict. It returns the configuration of the runs.
func runCountJob(t *testing.T, environ func(string) (string, bool)) worker.Config {
	ctx := testCtx(t, 2*time.Minute)
	c := testcluster.Kafka(t)
	in, out, dlq := testcluster.UniqueName(t, "in"), testcluster.UniqueName(t, "out"), testcluster.UniqueName(t, "dlq")
	c.CreateTopics(t, 2, in, out, dlq)

	gen := generateConfig{Brokers: c.Brokers, Topic: in, Job: "count", Records: 2500, Keys: 17, Batch: 500}
	if _, err := generate(ctx, gen, nil); err != nil {
		t.Fatal(err)
	}
	// A value the count job cannot decode: dead-lettered, not counted.
	if err := c.Client(t).ProduceSync(ctx, &kgo.Record{Topic: in, Key: []byte("k3"), Value: []byte("three")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	var stderr strings.Builder
	cfg, err := worker.Parse([]string{
		"--job", "count", "--http-addr", "off",
		"--name", testcluster.UniqueName(t, "count"), "--brokers", strings.Join(c.Brokers, ","),
		"--input", in, "--output", out, "--dead-letter", dlq, "--state-dir", t.TempDir(),
		"--interval", "50ms", "--checkpoint-timeout", "30s", "--txn-timeout", "40s",
	}, environ, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	// Each run is a worker that joins the job's group alone and gets every
	// task, with a fresh fencing epoch.
	runUntil := func(committed int) {
		t.Helper()
		log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- worker.Run(rctx, cfg, jobs, worker.Options{Logger: log}) }()
		waitCommitted(t, ctx, c.Brokers, out, committed)
		stop()
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
	}
	runUntil(2500)

	// More input, then a new process (a higher epoch) restores the
	// checkpoints of the first and carries on.
	gen.From = 2500
	if _, err := generate(ctx, gen, nil); err != nil {
		t.Fatal(err)
	}
	runUntil(5000)

	v, err := verify(ctx, c.Brokers, "count", in, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(v)
	if v.In != 5001 || v.BadInput != 1 || v.Out != 5000 || !v.Clean() {
		t.Fatalf("want 5001 records in (1 undecodable) and 5000 out exactly once, got: %v (notes %q)", v, v.Notes)
	}
	dead, _, err := readCommitted(ctx, c.Brokers, dlq)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || string(dead[0].Value) != "three" {
		t.Fatalf("dead-letter topic holds %d records, want the one undecodable record", len(dead))
	}

	// The lag group has the last checkpoint's positions: everything read.
	lagGroup := cfg.Group() + "-lag"
	offsets, err := c.Admin(t).FetchOffsets(ctx, lagGroup)
	if err != nil {
		t.Fatal(err)
	}
	var lagged int64
	offsets.Each(func(o kadm.OffsetResponse) { lagged += o.At })
	if lagged != 5001 {
		t.Errorf("group %s has committed offsets summing to %d, want 5001: %v", lagGroup, lagged, offsets)
	}
	return cfg
}

// checkCheckpointsCLI reads the checkpoints a count job run left with
// `checkpoints list` and `inspect`, as text and as JSON.
func checkCheckpointsCLI(t *testing.T, cfg worker.Config, backend string) {
	t.Helper()
	storage, err := checkpoint.Open(t.Context(), cfg.Checkpoints)
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(t, env(), "checkpoints", "list", "--checkpoints", cfg.Checkpoints, "--name", cfg.Name, "--json")
	if code != 0 {
		t.Fatalf("checkpoints list: exit code %d\n%s", code, stderr)
	}
	var rows []checkpointSummary
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("checkpoints list --json: %v\n%s", err, out)
	}
	newest := map[int]checkpointSummary{}
	count := map[int]int{}
	for _, r := range rows {
		count[r.Task]++
		// A checkpoint with no change of state since the one before it (a
		// Pebble delta snapshot without changes) uploads nothing.
		if r.Size <= 0 || r.Incremental < 0 || r.Incremental > r.Size || len(r.Sources) != 1 || r.Sources[0].Topic != cfg.Input {
			t.Errorf("task %d checkpoint %d: size %d, incremental %d, sources %v", r.Task, r.Checkpoint, r.Size, r.Incremental, r.Sources)
		}
		if r.Newest {
			if _, dup := newest[r.Task]; dup {
				t.Errorf("task %d: two newest checkpoints", r.Task)
			}
			newest[r.Task] = r
		}
	}
	var read int64
	for task := range 2 {
		ids, _, err := checkpoint.ListCheckpoints(t.Context(), storage, cfg.Name, task)
		if err != nil || len(ids) == 0 || count[task] != len(ids) {
			t.Fatalf("task %d: list shows %d checkpoints, storage holds %v (%v)", task, count[task], ids, err)
		}
		n, ok := newest[task]
		if !ok || n.Checkpoint != ids[len(ids)-1] {
			t.Fatalf("task %d: newest %+v, want checkpoint %d", task, n, ids[len(ids)-1])
		}
		read += n.Sources[0].Offset

		code, out, stderr := runCLI(t, env(), "checkpoints", "inspect", "--checkpoints", cfg.Checkpoints, "--name", cfg.Name,
			"--task", strconv.Itoa(task), "--id", strconv.FormatUint(uint64(n.Checkpoint), 10), "--json")
		if code != 0 {
			t.Fatalf("checkpoints inspect: exit code %d\n%s", code, stderr)
		}
		var got checkpoint.Manifest
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("checkpoints inspect --json: %v\n%s", err, out)
		}
		want, err := checkpoint.ReadManifest(t.Context(), storage, cfg.Name, task, n.Checkpoint)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("inspect --json of task %d checkpoint %d:\n got %+v\nwant %+v", task, n.Checkpoint, got, want)
		}
		for _, a := range got.Operators {
			if a.State != nil && a.State.Backend != backend && !(backend == "pebble" && a.State.Backend == "pebble-delta") {
				t.Errorf("operator %s: state backend %q, want %q", a.Operator, a.State.Backend, backend)
			}
		}
	}
	if read != 5001 {
		t.Errorf("the newest checkpoints' positions sum to %d, want all 5001 records read", read)
	}

	// The text forms, for the log and a look at their shape.
	code, out, stderr = runCLI(t, env(), "checkpoints", "list", "--checkpoints", cfg.Checkpoints, "--name", cfg.Name)
	t.Log("checkpoints list:\n" + out)
	if code != 0 || !strings.Contains(out, "TASK  ID") || !strings.Contains(out, cfg.Input+"/1@") {
		t.Errorf("checkpoints list: exit code %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCLI(t, env(), "checkpoints", "inspect", "--checkpoints", cfg.Checkpoints, "--name", cfg.Name, "--task", "1", "--id", "latest")
	t.Log("checkpoints inspect:\n" + out)
	if code != 0 || !strings.Contains(out, backend+" backend") && !strings.Contains(out, backend+"-delta backend") || !strings.Contains(out, "(the newest of") {
		t.Errorf("checkpoints inspect: exit code %d\n%s%s", code, out, stderr)
	}
}

// TestRunRefusesSettingsKafkaContradicts: settings that only Kafka can
// refute fail at start too, naming the setting, with exit code 2.
func TestRunRefusesSettingsKafkaContradicts(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := testcluster.Kafka(t)
	in, out := testcluster.UniqueName(t, "in"), testcluster.UniqueName(t, "out")
	c.CreateTopics(t, 2, in, out)
	b := testcluster.S3(t)
	if b.AccessKey != "" {
		t.Setenv("AWS_ACCESS_KEY_ID", b.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", b.SecretKey)
	}
	noBucket := "s3://" + testcluster.UniqueName(t, "no-bucket") + "/x?endpoint=" + b.Endpoint + "&region=" + b.Region
	for _, tc := range []struct {
		name        string
		input       string
		tasks       string
		checkpoints string
		want        string
	}{
		{"task without partition", in, "1,2", "memory", "--tasks: task 2 has no partition"},
		{"no input topic", testcluster.UniqueName(t, "missing"), "", "memory", "--input: input topic"},
		{"no bucket", in, "", noBucket, "--checkpoints: checkpoint storage " + strconv.Quote(noBucket)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr strings.Builder
			code := run(ctx, []string{"run", "--brokers", strings.Join(c.Brokers, ","), "--input", tc.input, "--output", out,
				"--tasks", tc.tasks, "--checkpoints", tc.checkpoints}, env(), io.Discard, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit code %d, want 2 with %q; stderr:\n%s", code, tc.want, stderr.String())
			}
		})
	}
}

func TestDemo(t *testing.T) {
	var out strings.Builder
	res, err := demo(testCtx(t, 2*time.Minute), demoConfig{
		Records: 6000, Accounts: 13, Partitions: 3, Interval: 100 * time.Millisecond,
		Produce: time.Second, CrashAt: 0.5, Timeout: 90 * time.Second,
	}, &out, testWriter{t})
	t.Log("demo output:\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Crashed || len(res.Restored) != 3 {
		t.Errorf("the demo did not crash and restore 3 tasks: crashed %v, restored %v", res.Crashed, res.Restored)
	}
	if v := res.Verdict; !v.Clean() || v.In != 6000 || v.Out != 6000 {
		t.Fatalf("verdict: %v", v)
	}
	for _, want := range []string{"embedded S3 (gofakes3) at http://127.0.0.1:", "Pebble state", "KiB full,", "incremental, input checkpointed",
		"*** CRASH", "latest checkpoint", "restarting", "verdict: records in 6000, records out 6000, duplicates 0, missing 0, wrong balances 0", "EXACTLY ONCE"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
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

// TestPartitionerKeptForGood: the word count keys by word through a
// repartition topic written with --partitioner. A start with another
// partitioner than the job's state was keyed with would send most words to
// another task than their counts, which would start over at 1: refused,
// naming the setting.
func TestPartitionerKeptForGood(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	c := testcluster.Kafka(t)
	in, out := testcluster.UniqueName(t, "lines"), testcluster.UniqueName(t, "counts")
	c.CreateTopics(t, 4, in, out)
	if _, err := generate(ctx, generateConfig{Brokers: c.Brokers, Topic: in, Job: "wordcount", Records: 200, Keys: 40, Batch: 200}, nil); err != nil {
		t.Fatal(err)
	}
	args := []string{
		"--job", "wordcount", "--http-addr", "off",
		"--name", testcluster.UniqueName(t, "wc"), "--brokers", strings.Join(c.Brokers, ","),
		"--input", in, "--output", out, "--state-dir", t.TempDir(), "--checkpoints", "file://" + t.TempDir(),
		"--interval", "50ms", "--checkpoint-timeout", "30s", "--txn-timeout", "40s",
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg, err := worker.Parse(args, env(), &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- worker.Run(rctx, cfg, jobs, worker.Options{Logger: log}) }()
	waitCommitted(t, ctx, c.Brokers, out, 200*5)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("first run: %v", err)
	}
	cfg, err = worker.Parse(append(args, "--partitioner", "fnv1a"), env(), &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	err = worker.Run(ctx, cfg, jobs, worker.Options{Logger: log})
	if err == nil || !strings.Contains(err.Error(), "--partitioner fnv1a") || !strings.Contains(err.Error(), "keyed with murmur2") {
		t.Fatalf("a start with --partitioner fnv1a over state keyed with murmur2: %v; want it refused, naming the setting", err)
	}
}
