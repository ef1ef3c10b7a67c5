package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/examples/count"
	"github.com/weirstream/weir/internal/diskfault"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/faultproxy"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/state"
)

// Tolerable checkpoint failures: a failed checkpoint (S3 down, disk full)
// fails the checkpoint, not the task, until more than --tolerable-failures
// fail in a row; then the task fails and restarts from its last valid
// checkpoint. Each test runs the count job in one worker (task 0 of a
// one-partition input, Pebble state) through a fault, in three phases of
// input: before, during and after it; then drains the worker and checks
// the output read_committed: every input record's effect exactly once.
//
// What "restarts from its last valid checkpoint" means here: the runner
// (engine.superviseTask) starts a new attempt of the task, which restores
// the newest manifest whose transactions are committed or still
// committable. No manifest can be written during the fault, so that is the
// newest checkpoint completed before it, and the tests assert that the
// attempt after the failure restored exactly that one (Observer.TaskRestored).

// faultObserver records what the runtime tells about task 0.
type faultObserver struct {
	engine.NopObserver
	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every event
	completed []checkpoint.Manifest
	aborted   []error
	failed    []error
	// restored holds the checkpoint each attempt restored, in order.
	restored []checkpoint.ID
	// lastBeforeFailure is the newest completed checkpoint when the first
	// failure came.
	lastBeforeFailure checkpoint.ID
}

func newFaultObserver() *faultObserver { return &faultObserver{changed: make(chan struct{})} }

func (o *faultObserver) event(f func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f()
	close(o.changed)
	o.changed = make(chan struct{})
}

func (o *faultObserver) CheckpointCompleted(_ string, _ int, m checkpoint.Manifest) {
	o.event(func() { o.completed = append(o.completed, m) })
}

func (o *faultObserver) CheckpointAborted(_ string, _ int, _ checkpoint.ID, err error) {
	o.event(func() { o.aborted = append(o.aborted, err) })
}

func (o *faultObserver) TaskFailed(_ string, _ int, err error, _ bool) {
	o.event(func() {
		if len(o.failed) == 0 {
			o.lastBeforeFailure = o.lastCompleted()
		}
		o.failed = append(o.failed, err)
	})
}

func (o *faultObserver) TaskRestored(_ string, _ int, _ int64, from checkpoint.ID, _ time.Duration) {
	o.event(func() { o.restored = append(o.restored, from) })
}

// lastCompleted is the newest completed checkpoint; o.mu is held.
func (o *faultObserver) lastCompleted() checkpoint.ID {
	if n := len(o.completed); n > 0 {
		return o.completed[n-1].Checkpoint
	}
	return 0
}

// covered is how many input records the newest completed checkpoint has
// consumed (the next offset of partition 0); o.mu is held.
func (o *faultObserver) covered() int64 {
	if n := len(o.completed); n > 0 {
		for _, a := range o.completed[n-1].Operators {
			for _, s := range a.Sources {
				return s.Offset
			}
		}
	}
	return 0
}

// waitFor waits until cond, called with o.mu held, is true, or fails the
// test after within saying what it waited for.
func (o *faultObserver) waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		o.mu.Lock()
		ok, changed := cond(), o.changed
		o.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			o.mu.Lock()
			defer o.mu.Unlock()
			t.Fatalf("after %v, still waiting for %s: %d checkpoints completed (covering %d records), %d aborted, task failed %d times, attempts restored %v",
				within, what, len(o.completed), o.covered(), len(o.aborted), len(o.failed), o.restored)
		}
	}
}

// faultJob is one worker of the count job over a one-partition input.
type faultJob struct {
	cluster  *testcluster.Cluster
	in, out  string
	obs      *faultObserver
	drain    chan struct{}
	done     chan error
	produced int
	stats    *Stats // the worker's, when the test gave it
}

// startFaultJob starts the worker of the count job with the test
// configuration changed by mod, and opts (its Observer and Drain are the
// job's).
func startFaultJob(t *testing.T, mod func(*Config), opts Options) *faultJob {
	t.Helper()
	j := newFaultJob(t)
	cfg := j.config(t)
	mod(&cfg)
	j.start(t, cfg, []Job{NewJob("count", count.Build)}, opts)
	return j
}

// newFaultJob creates the input and output topics, one partition each.
func newFaultJob(t *testing.T) *faultJob {
	t.Helper()
	c := testcluster.Kafka(t)
	j := &faultJob{cluster: c, in: testcluster.UniqueName(t, "in"), out: testcluster.UniqueName(t, "out"),
		obs: newFaultObserver(), drain: make(chan struct{}), done: make(chan error, 1)}
	c.CreateTopics(t, 1, j.in, j.out)
	return j
}

// config is the tests' configuration: task 0, checkpoints every 100 ms.
func (j *faultJob) config(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.Job, cfg.Name, cfg.Brokers, cfg.Input, cfg.Output = "count", testcluster.UniqueName(t, "job"), j.cluster.Brokers, j.in, j.out
	cfg.Tasks = []int{0}
	cfg.Checkpoints = "file://" + t.TempDir()
	cfg.StateDir = t.TempDir()
	cfg.Interval = 100 * time.Millisecond
	cfg.HTTPAddr = "off"
	// Restarts come quickly: the backoff is capped at half of this.
	cfg.RestartAllowance = 2 * time.Second
	return cfg
}

// start runs the worker until the test ends.
func (j *faultJob) start(t *testing.T, cfg Config, jobs []Job, opts Options) {
	t.Helper()
	logs := &syncBuffer{} // shown if the test fails
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	})
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	opts.Observer, opts.Drain = j.obs, j.drain
	ctx, cancel := context.WithCancel(context.Background())
	go func() { j.done <- Run(ctx, cfg, jobs, opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-j.done:
		case <-time.After(30 * time.Second):
			t.Errorf("worker did not stop within 30s of the cancel")
		}
	})
}

// produce writes n more input records, keys k0..k59, values their index.
func (j *faultJob) produce(t *testing.T, n int) {
	t.Helper()
	rs := make([]*kgo.Record, 0, n)
	for i := j.produced; i < j.produced+n; i++ {
		rs = append(rs, &kgo.Record{Key: []byte("k" + strconv.Itoa(i%60)), Value: []byte(strconv.Itoa(i))})
	}
	j.produceRecords(t, rs...)
}

// produceRecords writes rs to the input.
func (j *faultJob) produceRecords(t *testing.T, rs ...*kgo.Record) {
	t.Helper()
	for _, r := range rs {
		r.Topic = j.in
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := j.cluster.Client(t).ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", j.in, err)
	}
	j.produced += len(rs)
}

// waitCovered waits for a completed checkpoint past every record produced.
func (j *faultJob) waitCovered(t *testing.T, within time.Duration) {
	t.Helper()
	want := int64(j.produced)
	j.obs.waitFor(t, within, fmt.Sprintf("a checkpoint past %d records", want), func() bool { return j.obs.covered() >= want })
}

// finish drains the worker (final checkpoint, commit) and checks that the
// output has every input record's effect exactly once.
func (j *faultJob) finish(t *testing.T) {
	t.Helper()
	close(j.drain)
	select {
	case err := <-j.done:
		if err != nil {
			t.Fatalf("worker: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not drain within 30s")
	}
	j.done <- nil // for the cleanup
	out := readCommittedOutput(t, j.cluster, j.out)
	want := map[string]int64{}
	wantSum := map[string]int64{}
	for i := range j.produced {
		k := "k" + strconv.Itoa(i%60)
		want[k]++
		wantSum[k] += int64(i)
	}
	seen := map[string]map[int64]int{}
	final := map[string]count.Out{}
	for _, r := range out {
		var o count.Out
		if err := json.Unmarshal(r.Value, &o); err != nil {
			t.Fatalf("output %q: %v", r.Value, err)
		}
		if seen[o.Key] == nil {
			seen[o.Key] = map[int64]int{}
		}
		seen[o.Key][o.Count]++
		if o.Count > final[o.Key].Count {
			final[o.Key] = o
		}
	}
	var dups, missing, wrong int
	for k, n := range want {
		for c := int64(1); c <= n; c++ {
			switch m := seen[k][c]; {
			case m == 0:
				missing++
			case m > 1:
				dups += m - 1
			}
		}
		if final[k].Count != n || final[k].Sum != wantSum[k] {
			wrong++
		}
	}
	t.Logf("%d records in, %d out: %d duplicates, %d missing, %d keys with wrong totals", j.produced, len(out), dups, missing, wrong)
	if dups != 0 || missing != 0 || wrong != 0 || len(out) != j.produced {
		t.Fatal("output is not exactly once")
	}
}

// readCommittedOutput returns the records of topic's partition 0 read
// read_committed up to its last stable offset.
func readCommittedOutput(t *testing.T, c *testcluster.Cluster, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lsos, err := c.Admin(t).ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = lsos.Error()
	}
	if err != nil {
		t.Fatalf("last stable offset of %s: %v", topic, err)
	}
	lso, _ := lsos.Lookup(topic, 0)
	cl := c.Client(t,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords())
	var out []*kgo.Record
	for next := int64(0); next < lso.Offset; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("read %s at offset %d of %d: %v", topic, next, lso.Offset, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= lso.Offset {
				return
			}
			next = r.Offset + 1
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}

// s3Outage is S3 checkpoint storage behind a proxy that answers every
// request with a 500 while down is set.
func s3Outage(t *testing.T) (checkpoint.Storage, *atomic.Bool) {
	t.Helper()
	b := testcluster.S3(t)
	var down atomic.Bool
	p, err := faultproxy.Start(b.Endpoint, faultproxy.Options{Decide: func(*http.Request, int) faultproxy.Fault {
		if down.Load() {
			return faultproxy.Error500
		}
		return faultproxy.Pass
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	p.Enable(true)
	o := checkpoint.S3Options{
		Bucket: b.Name, Prefix: b.Prefix + "checkpoints", Region: b.Region, Endpoint: p.URL, PathStyle: true,
		// Fail fast: the test is about failed checkpoints, not retries.
		MaxRetries: 1, MaxBackoff: 5 * time.Millisecond,
	}
	if b.AccessKey != "" {
		o.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: b.AccessKey, SecretAccessKey: b.SecretKey, Source: "test"}, nil
		})
	}
	st, err := checkpoint.NewS3(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	return st, &down
}

// diskFaults returns the local disk failing as a control file says, for
// Options.StateFS, and a function that writes a fault into the file. The
// stores read the file every 100 ms at most, so a fault starts or ends
// within that.
func diskFaults(t *testing.T) (vfs.FS, func(mode string)) {
	file := filepath.Join(t.TempDir(), "faults")
	fsys := diskfault.New(file, nil).Wrap(vfs.Default)
	return fsys, func(mode string) {
		if err := os.WriteFile(file, []byte(mode), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// faultCase is one way of making checkpoints fail.
type faultCase struct {
	name string
	// interval is the checkpoint interval (default 100ms).
	interval time.Duration
	// config, if set, changes the worker's settings.
	config func(*Config)
	setup  func(t *testing.T) (opts Options, fault func(on bool))
	// says tells the error of a checkpoint failed by the fault.
	says func(err error) bool
}

var faultCases = []faultCase{
	{
		name: "s3-down",
		setup: func(t *testing.T) (Options, func(bool)) {
			st, down := s3Outage(t)
			return Options{Storage: st}, func(on bool) { down.Store(on) }
		},
		says: func(err error) bool { return strings.Contains(err.Error(), "500") },
	},
	{
		name: "disk-full",
		// The worker reads the control file at the first disk operation
		// 100 ms after the last read: with checkpoints (and so flushes)
		// further apart than that, a fault nearly always begins at a
		// flush's first file, rather than between a flush's SST and its
		// MANIFEST edit, which Pebble takes for fatal.
		interval: 300 * time.Millisecond,
		// Every delta through the disk: a delta held in memory needs none.
		config: func(c *Config) { c.StateDeltaMemory = 0 },
		setup: func(t *testing.T) (Options, func(bool)) {
			fsys, set := diskFaults(t)
			return Options{StateFS: fsys}, func(on bool) {
				if on {
					set(diskfault.ENOSPC)
				} else {
					set(diskfault.None)
				}
			}
		},
		says: func(err error) bool { return errors.Is(err, syscall.ENOSPC) },
	},
}

// configure applies the case's interval and settings.
func (fc faultCase) configure(c *Config) {
	if fc.interval > 0 {
		c.Interval = fc.interval
	}
	if fc.config != nil {
		fc.config(c)
	}
}

// TestCheckpointFailuresTolerated: checkpoints fail while S3 is down or the
// disk is full, fewer in a row than tolerated: the task keeps running (no
// failure, no second restore), the first checkpoint after the fault
// completes, and the output is exactly once.
//
// Unless the disk filled up between a flush's SST and its MANIFEST edit:
// Pebble takes that for fatal, the store breaks (state.ErrBroken) and its
// snapshots fail until the task fails and restarts from the last valid
// checkpoint. That is checked instead when it happens (rarely: see the
// disk case's interval).
func TestCheckpointFailuresTolerated(t *testing.T) {
	for _, fc := range faultCases {
		t.Run(fc.name, func(t *testing.T) {
			opts, fault := fc.setup(t)
			j := startFaultJob(t, func(c *Config) { c.TolerableFailures = 5; fc.configure(c) }, opts)
			o := j.obs
			j.produce(t, 2000)
			j.waitCovered(t, 15*time.Second)

			fault(true)
			j.produce(t, 2000)
			var aborted int
			o.mu.Lock()
			aborted = len(o.aborted)
			o.mu.Unlock()
			// Two failures, then the fault ends: at most one more fails.
			o.waitFor(t, 10*time.Second, "two failed checkpoints", func() bool { return len(o.aborted) >= aborted+2 })
			fault(false)
			j.produce(t, 2000)
			j.waitCovered(t, 15*time.Second)

			o.mu.Lock()
			for _, err := range o.aborted[aborted:] {
				if !fc.says(err) {
					t.Errorf("checkpoint failed with %v, not the fault's error", err)
				}
			}
			t.Logf("%d checkpoints failed during the fault, first: %v", len(o.aborted)-aborted, o.aborted[aborted])
			switch broken := errors.Is(o.aborted[len(o.aborted)-1], state.ErrBroken); {
			case broken && (len(o.failed) == 0 || len(o.restored) < 2 || o.restored[1] != o.lastBeforeFailure):
				t.Errorf("the store broke, but the task did not restart from its last valid checkpoint %d: failed %v, restored %v", o.lastBeforeFailure, o.failed, o.restored)
			case broken:
				t.Logf("the fault began within a flush, which broke the store: the task restored checkpoint %d", o.restored[1])
			case len(o.failed) > 0 || len(o.restored) != 1:
				t.Errorf("the task failed (%v) or restarted (restored %v) though the failures were tolerated", o.failed, o.restored)
			}
			o.mu.Unlock()
			j.finish(t)
		})
	}
}

// TestCheckpointFailuresPastTolerated: more checkpoints fail in a row than
// tolerated (1): the task fails, its restarts fail while the fault lasts (a
// restore needs S3; a new store needs the disk), and once the fault is
// over it restarts from the last checkpoint that completed before it; the
// output is exactly once.
func TestCheckpointFailuresPastTolerated(t *testing.T) {
	for _, fc := range faultCases {
		t.Run(fc.name, func(t *testing.T) {
			opts, fault := fc.setup(t)
			j := startFaultJob(t, func(c *Config) { c.TolerableFailures = 1; fc.configure(c) }, opts)
			o := j.obs
			j.produce(t, 2000)
			j.waitCovered(t, 15*time.Second)

			fault(true)
			j.produce(t, 2000)
			// The failure, then a restart that fails too while the fault
			// lasts.
			o.waitFor(t, 10*time.Second, "the task to fail twice", func() bool { return len(o.failed) >= 2 })
			o.mu.Lock()
			first, second, lastGood, attempts := o.failed[0], o.failed[1], o.lastBeforeFailure, len(o.restored)
			o.mu.Unlock()
			if !errors.Is(first, checkpoint.ErrTooManyFailures) {
				t.Fatalf("the task failed with %v, want too many failed checkpoints", first)
			}
			if !fc.says(second) {
				t.Errorf("the restart during the fault failed with %v, not the fault's error", second)
			}
			if lastGood == 0 {
				t.Fatal("no checkpoint completed before the failure")
			}
			t.Logf("task failed: %v", first)
			t.Logf("then: %v", second)
			fault(false)
			o.waitFor(t, 15*time.Second, "a restore after the failure", func() bool { return len(o.restored) > attempts })
			o.mu.Lock()
			if from := o.restored[attempts]; from != lastGood {
				t.Errorf("the task restored checkpoint %d after the failure, want %d, the last completed", from, lastGood)
			}
			t.Logf("restored checkpoint %d after %d failures", o.restored[attempts], len(o.failed))
			o.mu.Unlock()
			j.produce(t, 2000)
			j.waitCovered(t, 15*time.Second)
			j.finish(t)
		})
	}
}
