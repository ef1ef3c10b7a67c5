package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/weirstream/weir/internal/testcluster"
)

// countJob is one instance of the processor's count job in a test: its
// topics, its checkpoint storage and a unique name (so that its
// transactional ids are its own on a shared broker).
type countJob struct {
	t           *testing.T
	c           *testcluster.Cluster
	ps          *procs
	name        string
	input       string
	output      string
	partitions  int32
	checkpoints string // directory of the file:// storage
	storage     string // --checkpoints; "file://" + checkpoints unless useS3
	stateRoot   string
	starts      int
}

func newCountJob(t *testing.T, c *testcluster.Cluster, partitions int32) *countJob {
	t.Helper()
	j := &countJob{
		t:           t,
		c:           c,
		ps:          newProcs(t),
		name:        testcluster.UniqueName(t, "job"),
		input:       testcluster.UniqueName(t, "in"),
		output:      testcluster.UniqueName(t, "out"),
		partitions:  partitions,
		checkpoints: t.TempDir(),
		stateRoot:   t.TempDir(),
	}
	j.storage = "file://" + j.checkpoints
	c.CreateTopics(t, partitions, j.input, j.output)
	return j
}

// useS3 makes j's workers checkpoint to b (under b.Prefix) instead of the
// file:// directory: the endpoint, region and path style go in the
// s3:// URI, the credentials in the workers' environment, where the SDK's
// default chain finds them (the test's own environment stays as it is).
func (j *countJob) useS3(b *testcluster.Bucket) {
	q := url.Values{"endpoint": {b.Endpoint}, "region": {b.Region}, "path_style": {"true"}}
	j.storage = "s3://" + b.Name + "/" + strings.TrimSuffix(b.Prefix, "/") + "?" + q.Encode()
	j.ps.env = append(j.ps.env, "AWS_REGION="+b.Region)
	if b.AccessKey != "" {
		j.ps.env = append(j.ps.env, "AWS_ACCESS_KEY_ID="+b.AccessKey, "AWS_SECRET_ACCESS_KEY="+b.SecretKey, "AWS_SESSION_TOKEN=")
	}
}

// run starts `processor run` for tasks (e.g. "0,1"; "" for the tasks the
// job's consumer group assigns) with a state directory of its own; flags
// override the defaults below.
func (j *countJob) run(name, tasks string, flags ...string) *proc {
	j.t.Helper()
	j.starts++
	args := []string{"run",
		"--job", "count",
		"--name", j.name,
		"--brokers", strings.Join(j.c.Brokers, ","),
		"--input", j.input,
		"--output", j.output,
		"--checkpoints", j.storage,
		"--state-dir", filepath.Join(j.stateRoot, strconv.Itoa(j.starts)),
		"--delivery", "exactly-once",
		"--http-addr", "127.0.0.1:0",
	}
	if tasks != "" {
		args = append(args, "--tasks", tasks)
	}
	return j.ps.start(name, append(args, flags...)...)
}

// verify runs `processor verify` and returns its output and whether it
// exited 0.
func (j *countJob) verify(ctx context.Context) (string, bool) {
	j.t.Helper()
	cmd := exec.CommandContext(ctx, j.ps.bin, "verify",
		"--brokers", strings.Join(j.c.Brokers, ","), "--input", j.input, "--output", j.output)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err == nil
}

// finish reads the whole output (once no worker runs), reads the input, and
// returns the exactly-once report.
func (j *countJob) finish(ctx context.Context, r *outputReader, records int64) eoReport {
	j.t.Helper()
	out := r.Finish(ctx, j.c)
	in := readInput(ctx, j.t, j.c, j.input, records)
	return checkExactlyOnce(in, out)
}

// testSeed returns WEIR_TEST_SEED if set, else a fresh seed, and logs it.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("WEIR_TEST_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("WEIR_TEST_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (rerun with WEIR_TEST_SEED=%d)", seed, seed)
	return seed
}

// envInt returns the integer in environment variable key, or def.
func envInt(t *testing.T, key string, def int64) int64 {
	t.Helper()
	s := os.Getenv(key)
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, s, err)
	}
	return n
}

// TestKillNine is DESIGN.md's exactly-once check: two worker processes run
// the count job's four tasks (tasks 0,1 and 2,3) while a generator writes
// numbered records; at random moments (seeded) one or both are killed with
// SIGKILL and started again, at least minKills times; then they run until the
// output holds a record for every input record, stop, and a read_committed
// reader checks that every key's counts are exactly 1..n, each once, with
// the right running sums. It runs with file:// checkpoints and again with
// Pebble state checkpointed to S3 (issue 6), where it also checks that the
// manifests and the shared SSTs are in the bucket.
func TestKillNine(t *testing.T) {
	t.Run("file", func(t *testing.T) { testKillNine(t, testcluster.Kafka(t), nil) })
	t.Run("pebble-s3", func(t *testing.T) {
		b := testcluster.S3(t)
		testKillNine(t, testcluster.Kafka(t), b)
	})
}

// testKillNine runs the scenario on c, with file:// checkpoints, or with
// Pebble state and checkpoints in b if b is not nil.
func testKillNine(t *testing.T, c *testcluster.Cluster, b *testcluster.Bucket) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))

	// A real broker (CI) takes the full load; kfake lives in this
	// race-detector process, and `make test` runs everything on two cores.
	records := int64(200_000)
	if c.Provider == testcluster.ProviderInProcess {
		records = 50_000
	}
	records = envInt(t, "WEIR_KILL_RECORDS", records)
	const keys, minKills = 1000, 10
	minDelay, maxDelay := 300*time.Millisecond, 2500*time.Millisecond
	// The input arrives over about the time the kills take, so that the
	// workers are killed while they read, write and checkpoint.
	killPhase := minKills * (minDelay + maxDelay) / 2
	rate := int(float64(records) / killPhase.Seconds())

	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	j := newCountJob(t, c, 4)
	storage := "file:// (" + j.checkpoints + ")"
	flags := []string{"--interval", "100ms", "--tolerable-failures", "3", "--txn-timeout", "60s", "--pool-size", "9"}
	if b != nil {
		j.useS3(b)
		storage = fmt.Sprintf("s3:// (%s at %s, bucket %s, prefix %s)", b.Provider, b.Endpoint, b.Name, b.Prefix)
		flags = append(flags, "--state-backend", "pebble")
	}
	t.Logf("checkpoint storage: %s", storage)
	out := startOutputReader(t, c, j.output, j.partitions)
	gen := startGenerator(t, c, j.input, keys, records, rate)

	type worker struct {
		tasks string
		p     *proc
	}
	workers := []*worker{{tasks: "0,1"}, {tasks: "2,3"}}
	var all []*proc
	start := func(w *worker) {
		w.p = j.run("tasks-"+strings.ReplaceAll(w.tasks, ",", "-"), w.tasks, flags...)
		all = append(all, w.p)
	}
	for _, w := range workers {
		start(w)
	}

	kills := 0
	began := time.Now()
	for kills < minKills {
		delay := minDelay + time.Duration(rng.Int64N(int64(maxDelay-minDelay)))
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case <-ctx.Done():
			t.Fatalf("kill phase: %v", ctx.Err())
		}
		victims := workers
		if v := rng.IntN(3); v < 2 { // one of them, or (2) both
			victims = workers[v : v+1]
		}
		for _, w := range victims {
			if w.p.Exited() {
				t.Fatalf("worker %s (pid %d) ended by itself: %s", w.p.name, w.p.Pid(), w.p.state())
			}
			w.p.Kill9()
			kills++
			recs, distinct := out.Progress()
			t.Logf("kill %d after %v: SIGKILL %s (pid %d); output so far %d records, %d distinct, input %d",
				kills, delay.Round(time.Millisecond), w.p.name, w.p.Pid(), recs, distinct, gen.produced.Load())
		}
		for _, w := range victims {
			start(w)
		}
	}
	t.Logf("%d kills in %v", kills, time.Since(began).Round(time.Millisecond))

	wctx, wcancel := context.WithTimeout(ctx, 6*time.Minute)
	total := gen.Wait(wctx)
	err := out.WaitFor(wctx, func(_, distinct int) bool { return int64(distinct) >= total })
	wcancel()
	if err != nil {
		recs, distinct := out.Progress()
		t.Errorf("the output did not cover the input: %v; %d records, %d distinct of %d", err, recs, distinct, total)
	}
	for _, w := range workers {
		if err, graceful := w.p.Terminate(time.Minute); err != nil || !graceful {
			t.Errorf("worker %s on SIGTERM: %v (graceful %v)", w.p.name, err, graceful)
		}
	}
	verifyOut, verifyOK := j.verify(ctx)
	rep := j.finish(ctx, out, total)
	t.Logf("records in %d, records out %d, kills %d, duplicates %d, missing %d, seed %d, storage %s",
		rep.In, rep.Out, kills, rep.Duplicates, rep.Missing, seed, storage)
	t.Logf("processor verify: %s (ok %v)", verifyOut, verifyOK)
	assertExactlyOnce(t, rep)
	if clean := rep.Duplicates == 0 && rep.Missing == 0; verifyOK != clean {
		t.Errorf("processor verify disagrees with the test's check (%v): %s", rep, verifyOut)
	}
	restores := 0 // tasks that started from a checkpoint
	for _, p := range all {
		for _, l := range p.Lines() {
			if isMsg(msgRestoring, -1)(l) {
				restores++
			}
		}
	}
	t.Logf("%d worker starts, %d task restores from a checkpoint", len(all), restores)
	if b != nil {
		if restores == 0 {
			t.Errorf("no task restored from a checkpoint in S3: the kills tested nothing of S3")
		}
		checkS3Checkpoints(ctx, t, b, j)
	}
	if t.Failed() {
		t.Logf("seed %d", seed)
	}
}

// checkS3Checkpoints lists j's checkpoints in b and fails the test unless
// every task has a manifest there and Pebble's SSTs are under shared/: the
// workers did checkpoint to S3, not somewhere else.
func checkS3Checkpoints(ctx context.Context, t *testing.T, b *testcluster.Bucket, j *countJob) {
	t.Helper()
	root := b.Prefix + j.name + "/"
	manifests := map[int]int{} // task -> manifest.json objects
	var ssts, objects int
	var size int64
	pages := s3.NewListObjectsV2Paginator(b.Client(t), &s3.ListObjectsV2Input{Bucket: aws.String(b.Name), Prefix: aws.String(root)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			t.Fatalf("list s3://%s/%s: %v", b.Name, root, err)
		}
		for _, o := range page.Contents {
			key := strings.TrimPrefix(aws.ToString(o.Key), root)
			objects++
			size += aws.ToInt64(o.Size)
			if rest, ok := strings.CutPrefix(key, "tasks/"); ok && strings.HasSuffix(key, "/manifest.json") {
				task, _, _ := strings.Cut(rest, "/")
				n, err := strconv.Atoi(task)
				if err != nil {
					t.Errorf("manifest %s: task %q", key, task)
					continue
				}
				manifests[n]++
			}
			if strings.HasPrefix(key, "shared/") && strings.HasSuffix(key, ".sst") {
				ssts++
			}
		}
	}
	t.Logf("s3://%s/%s: %d objects, %d bytes; manifest.json per task %v; %d shared SSTs", b.Name, root, objects, size, manifests, ssts)
	for task := range int(j.partitions) {
		if manifests[task] == 0 {
			t.Errorf("no manifest.json of task %d under s3://%s/%stasks/%d/", task, b.Name, root, task)
		}
	}
	if ssts == 0 {
		t.Errorf("no SST under s3://%s/%sshared/", b.Name, root)
	}
}
