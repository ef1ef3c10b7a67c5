package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/examples/balance"
	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/worker"
)

// demoConfig is the configuration of `processor demo`.
type demoConfig struct {
	Records    int64
	Accounts   int
	Partitions int
	Interval   time.Duration
	// Produce is how long the input takes to arrive: the job runs on a
	// live stream, not a finished topic.
	Produce time.Duration
	// CrashAt is the share of the input read when the job crashes.
	CrashAt float64
	Timeout time.Duration
	// Dir holds the local state (Pebble stores); default a temporary
	// directory, removed at the end. Checkpoints go to an in-process S3
	// server and vanish with it.
	Dir string
	// Verbose logs the runtime's info lines to stderr.
	Verbose bool
}

func defaultDemoConfig() demoConfig {
	return demoConfig{Records: 200_000, Accounts: 50, Partitions: 4, Interval: 500 * time.Millisecond,
		Produce: 4 * time.Second, CrashAt: 0.5, Timeout: 50 * time.Second}
}

func (c *demoConfig) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if c.Records <= 0 {
		bad("records", "must be > 0, got %d", c.Records)
	}
	if c.Accounts <= 0 {
		bad("accounts", "must be > 0, got %d", c.Accounts)
	}
	if c.Partitions <= 0 {
		bad("partitions", "must be > 0, got %d", c.Partitions)
	}
	if c.Interval <= 0 {
		bad("interval", "must be > 0, got %v", c.Interval)
	}
	if c.Produce < 0 {
		bad("produce", "must not be negative, got %v", c.Produce)
	}
	if c.CrashAt <= 0 || c.CrashAt >= 1 {
		bad("crash-at", "must be between 0 and 1 (exclusive), got %v", c.CrashAt)
	}
	if c.Timeout <= 0 {
		bad("timeout", "must be > 0, got %v", c.Timeout)
	}
	return errors.Join(errs...)
}

func demoCommand(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	c := defaultDemoConfig()
	fs := cli.NewFlagSet("processor demo", "Run the balance example on an embedded Kafka (kfake), with Pebble state checkpointed\nincrementally to an embedded S3 server (gofakes3 over HTTP): produce transfers, run the job\nwith exactly-once output, crash it midway, restore, and verify the committed output.", stderr)
	fs.Int64Var(&c.Records, "records", c.Records, "transfers to produce")
	fs.IntVar(&c.Accounts, "accounts", c.Accounts, "accounts")
	fs.IntVar(&c.Partitions, "partitions", c.Partitions, "partitions of the topics = tasks")
	fs.DurationVar(&c.Interval, "interval", c.Interval, "checkpoint interval")
	fs.DurationVar(&c.Produce, "produce", c.Produce, "time over which the transfers are produced (0: all at once)")
	fs.Float64Var(&c.CrashAt, "crash-at", c.CrashAt, "crash once this share of the input was read")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "give up after this")
	fs.StringVar(&c.Dir, "dir", c.Dir, "directory for local state (default: a temporary one, removed)")
	fs.BoolVar(&c.Verbose, "v", c.Verbose, "log the runtime's info lines to stderr")
	if err := cli.Parse(fs, args, lookup); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return cli.UsageError{Err: err}
	}
	res, err := demo(ctx, c, stdout, stderr)
	if err != nil {
		return err
	}
	if !res.Verdict.Clean() {
		return errors.New("demo: the output is not exactly once")
	}
	return nil
}

type demoResult struct {
	Verdict  Verdict
	Crashed  bool
	Restored map[int]checkpoint.ID // per task, the checkpoint the restart restored
}

const (
	demoInput  = "transfers"
	demoOutput = "balances"
	demoJob    = "balance"
)

func demo(ctx context.Context, c demoConfig, out, stderr io.Writer) (res demoResult, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	began := time.Now()
	// p is called from the tasks' observer too, while the job runs on.
	var outMu sync.Mutex
	p := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, "%5.1fs  "+format+"\n", append([]any{time.Since(began).Seconds()}, args...)...)
	}

	dir := c.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "weir-demo-"); err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(c.Partitions), demoInput, demoOutput))
	if err != nil {
		return res, fmt.Errorf("start kfake: %w", err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	p("embedded Kafka (kfake) at %s; topics %s and %s with %d partitions", brokers[0], demoInput, demoOutput, c.Partitions)

	// The input arrives while the job runs.
	var produced atomic.Int64
	gen := generateConfig{Brokers: brokers, Topic: demoInput, Job: "balance", Records: c.Records, Keys: c.Accounts, Batch: 2000}
	if c.Produce > 0 {
		gen.Rate = max(1, int(float64(c.Records)/c.Produce.Seconds()))
	}
	genErr := make(chan error, 1)
	go func() {
		_, err := generate(ctx, gen, &produced)
		genErr <- err
	}()
	p("producing %d transfers over %d accounts to %s (%s)", c.Records, c.Accounts, demoInput, rateText(gen.Rate))

	// A read_committed reader counts the output as it commits.
	var committed atomic.Int64
	tailCtx, stopTail := context.WithCancel(ctx)
	tailDone := make(chan struct{})
	go func() { defer close(tailDone); tail(tailCtx, brokers, demoOutput, &committed) }()
	defer func() { stopTail(); <-tailDone }()

	// The runtime warns about checkpoints cut short by the demo's stops;
	// only errors are news here.
	level := slog.LevelError
	if c.Verbose {
		level = slog.LevelInfo
	}
	cfg := worker.DefaultConfig()
	cfg.Job, cfg.Name = demoJob, demoJob
	cfg.Brokers, cfg.Input, cfg.Output = brokers, demoInput, demoOutput
	s3, err := startDemoS3(ctx)
	if err != nil {
		return res, err
	}
	defer s3.close()
	p("embedded S3 (gofakes3) at %s; checkpoints to bucket %s under %s/", s3.endpoint, demoBucket, demoPrefix)
	cfg.Checkpoints = s3.uri
	cfg.StateBackend = "pebble"
	cfg.HTTPAddr = "off"
	for t := range c.Partitions {
		cfg.Tasks = append(cfg.Tasks, t)
	}
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Interval, cfg.CheckpointTimeout = c.Interval, 10*time.Second
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	demoJobs := []worker.Job{worker.NewJob(demoJob, balance.Build)}
	obs := &demoObserver{p: p, tasks: c.Partitions, total: c.Records, done: map[int]bool{}, pos: map[int]int64{}, pending: map[checkpoint.ID][]demoCheckpoint{}}
	st := &worker.Stats{}
	start := func() (context.CancelFunc, <-chan error) {
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- worker.Run(rctx, cfg, demoJobs, worker.Options{Logger: log, Stats: st, Observer: obs, Storage: s3.storage})
		}()
		return stop, done
	}

	p("starting job %q: %d tasks, Pebble state, exactly-once Kafka sink, checkpoints every %v to s3://%s/%s/",
		demoJob, c.Partitions, c.Interval, demoBucket, demoPrefix)
	stop, done := start()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	progress := func() {
		p("progress: produced %d, read %d, committed out %d", produced.Load(), recordsIn(st), committed.Load())
	}

	// Phase 1: run until the crash point, with a checkpoint on every task.
	crashAt := int64(float64(c.Records) * c.CrashAt)
	for !res.Crashed {
		select {
		case <-ctx.Done():
			stop()
			<-done
			return res, fmt.Errorf("demo: no crash point within %v: %w", c.Timeout, ctx.Err())
		case err := <-done:
			stop()
			return res, fmt.Errorf("demo: the job stopped before the crash: %v", err)
		case err := <-genErr:
			if err != nil {
				stop()
				<-done
				return res, fmt.Errorf("demo: produce: %w", err)
			}
			genErr = nil
		case <-tick.C:
			progress()
		case <-obs.changed():
		}
		if recordsIn(st) >= crashAt && obs.allCheckpointed() {
			res.Crashed = true
		}
	}

	// The crash: cancel the run with no final checkpoint. Transactions
	// pre-committed for checkpoints that did not complete stay open in
	// the broker; what the tasks read after their last checkpoint is read
	// again after the restart.
	p("*** CRASH: stopping the job abruptly after reading %d records, %d committed out (no final checkpoint)", recordsIn(st), committed.Load())
	stop()
	if err := <-done; err != nil {
		return res, fmt.Errorf("demo: first run: %w", err)
	}
	readBefore := recordsIn(st)
	storage := s3.storage
	res.Restored = map[int]checkpoint.ID{}
	var checkpointed int64
	for task := range c.Partitions {
		ids, _, err := checkpoint.ListCheckpoints(ctx, storage, demoJob, task)
		if err != nil || len(ids) == 0 {
			return res, fmt.Errorf("demo: checkpoints of task %d: %v (found %d)", task, err, len(ids))
		}
		m, err := checkpoint.ReadManifest(ctx, storage, demoJob, task, ids[len(ids)-1])
		if err != nil {
			return res, err
		}
		res.Restored[task] = m.Checkpoint
		var pos int64
		for _, a := range m.Operators {
			for _, sp := range a.Sources {
				pos += sp.Offset
			}
		}
		checkpointed += pos
		full, incr := stateSizes(m)
		p("task %d: latest checkpoint %d at input offset %d, state %s (%s of it new), %d pending transactions",
			task, m.Checkpoint, pos, byteSize(full), byteSize(incr), len(committablesOf(m)))
	}
	p("restarting with a new fencing epoch: each task restores its checkpoint, commits its pending transactions, fences the")
	p("old producers and reads again from the checkpoint's offsets: %d records read after the checkpoints are read twice", readBefore-checkpointed)
	obs.reset()

	// Phase 2: restore and run until the output caught up with the input.
	stop, done = start()
	lastOut, idleSince := int64(-1), time.Now()
	for {
		select {
		case <-ctx.Done():
			stop()
			<-done
			return res, fmt.Errorf("demo: output did not catch up within %v (committed %d of %d): %w", c.Timeout, committed.Load(), c.Records, ctx.Err())
		case err := <-done:
			stop()
			return res, fmt.Errorf("demo: the job stopped: %v", err)
		case err := <-genErr:
			if err != nil {
				stop()
				<-done
				return res, fmt.Errorf("demo: produce: %w", err)
			}
			genErr = nil
		case <-tick.C:
			progress()
		case <-obs.changed():
		}
		n := committed.Load()
		if n >= c.Records {
			p("output caught up: %d balances committed for %d transfers", n, c.Records)
			break
		}
		if n != lastOut {
			lastOut, idleSince = n, time.Now()
		}
		if obs.position() >= c.Records && time.Since(idleSince) > 5*c.Interval+2*time.Second {
			p("input fully checkpointed, but the output is stuck at %d of %d", n, c.Records)
			break
		}
	}
	stop()
	if err := <-done; err != nil {
		return res, fmt.Errorf("demo: second run: %w", err)
	}
	p("records read %d (%d read twice because of the crash), written %d (rewrites in aborted transactions included)",
		recordsIn(st), recordsIn(st)-c.Records, recordsOut(st))

	// The verdict, from what a read_committed consumer sees.
	v, err := verify(ctx, brokers, "balance", demoInput, demoOutput)
	if err != nil {
		return res, err
	}
	res.Verdict = v
	for _, n := range v.Notes {
		p("note: %s", n)
	}
	p("verdict: %s", v)
	if v.WrongTotals == 0 {
		p("final balances: all %d accounts equal the sum of their transfers", c.Accounts)
	}
	if v.Clean() {
		p("EXACTLY ONCE: every transfer is in the output once, despite the crash")
	} else {
		p("NOT EXACTLY ONCE")
	}
	return res, nil
}

func rateText(rate int) string {
	if rate == 0 {
		return "all at once"
	}
	return fmt.Sprintf("%d per second", rate)
}

func committablesOf(m checkpoint.Manifest) []checkpoint.Committable {
	var cs []checkpoint.Committable
	for _, a := range m.Operators {
		cs = append(cs, a.Committables...)
	}
	return cs
}

// tail counts the committed records of topic until ctx ends.
func tail(ctx context.Context, brokers []string, topic string, n *atomic.Int64) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		n.Add(int64(fs.NumRecords()))
	}
}

type demoCheckpoint struct {
	task        int
	duration    time.Duration
	size        int64
	incremental int64
}

// demoObserver prints one line per checkpoint id once every task completed
// it, and tracks each task's checkpointed input position.
type demoObserver struct {
	engine.NopObserver
	p     func(string, ...any)
	tasks int
	total int64

	mu      sync.Mutex
	done    map[int]bool  // tasks with a completed checkpoint in this run
	pos     map[int]int64 // per task, the last checkpointed offset
	pending map[checkpoint.ID][]demoCheckpoint
	wake    chan struct{}
}

func (o *demoObserver) changed() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.wake == nil {
		o.wake = make(chan struct{})
	}
	return o.wake
}

func (o *demoObserver) notify() {
	if o.wake != nil {
		close(o.wake)
		o.wake = nil
	}
}

func (o *demoObserver) CheckpointCompleted(_ string, task int, m checkpoint.Manifest) {
	d := time.Since(m.Timestamp)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.done[task] = true
	var pos int64
	for _, a := range m.Operators {
		for _, sp := range a.Sources {
			pos += sp.Offset
		}
	}
	o.pos[task] = pos
	full, incr := stateSizes(m)
	cs := append(o.pending[m.Checkpoint], demoCheckpoint{task: task, duration: d, size: full, incremental: incr})
	o.pending[m.Checkpoint] = cs
	if len(cs) == o.tasks {
		delete(o.pending, m.Checkpoint)
		var size, uploaded int64
		var slowest time.Duration
		for _, c := range cs {
			size += c.size
			uploaded += c.incremental
			slowest = max(slowest, c.duration)
		}
		var in int64
		for _, v := range o.pos {
			in += v
		}
		o.p("checkpoint %3d complete on %d/%d tasks: %4dms, state %s full, %s incremental, input checkpointed %d/%d",
			m.Checkpoint, len(cs), o.tasks, slowest.Milliseconds(), byteSize(size), byteSize(uploaded), in, o.total)
	}
	o.notify()
}

func (o *demoObserver) CheckpointAborted(_ string, task int, id checkpoint.ID, err error) {
	if errors.Is(err, context.Canceled) {
		return // the demo stopped the job
	}
	o.p("checkpoint %d aborted on task %d: %v", id, task, err)
}

func (o *demoObserver) TaskFailed(_ string, task int, err error, restarting bool) {
	o.p("task %d failed (restarting: %v): %v", task, restarting, err)
}

func (o *demoObserver) allCheckpointed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.done) == o.tasks
}

func (o *demoObserver) position() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var in int64
	for _, v := range o.pos {
		in += v
	}
	return in
}

func (o *demoObserver) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	clear(o.done)
	clear(o.pending)
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func recordsIn(st *worker.Stats) int64 { in, _ := st.Records(); return in }

func recordsOut(st *worker.Stats) int64 { _, out := st.Records(); return out }
