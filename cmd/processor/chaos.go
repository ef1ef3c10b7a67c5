package main

import (
	"context"
	cryptorand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/internal/faultproxy"
)

// The chaos runner: `processor chaos` runs the count job on --workers
// worker processes of this binary against a real broker and an S3 server
// for --duration, while it injects one fault after another at random, and
// then checks the output read_committed for every input record exactly
// once. It is what Kafka's transaction system tests and Jepsen do, on one
// machine: the faults are the ones production has (a worker killed, one
// paused past its session timeout and so a zombie when it wakes, a drain,
// a broker restart, one worker alive but cut off from Kafka, from S3 or
// from both past its session timeout, a slow and lossy link to Kafka, S3
// failing or slow, a disk full or failing under one worker's state), one
// at a time, with the next one not waiting for the job to recover from the
// last unless --max-recovery says so.

// chaosFaults are the faults the runner knows, in the order it reports them.
var chaosFaults = []string{"sigkill", "sigstop", "sigterm", "broker-restart", "kafka-cut", "kafka-slow",
	"s3-errors", "s3-latency", "s3-cut", "net-cut", "disk-full", "disk-errors", "state-wipe", "partitions-added"}

// lastFaults are the faults of chaosFaults that end the job, by design: the
// runner injects them once, after the others and after the output caught
// up, and checks that the job stopped loudly.
var lastFaults = []string{"partitions-added"}

// kafkaLinkFaults are the faults of one worker's link to Kafka: each worker
// reaches the broker through a TCP fault proxy of its own, in front of a
// listener of the broker's own for that worker (scripts/kafka,
// WEIR_KAFKA_PROXIED_LISTENERS), so that a cut leaves the others alone.
var kafkaLinkFaults = []string{"kafka-cut", "kafka-slow", "net-cut"}

// proxiedListenersEnv is scripts/kafka's setting for the broker's listeners
// per worker, and proxiedListenersFile the file it lists them in.
const (
	proxiedListenersEnv  = "WEIR_KAFKA_PROXIED_LISTENERS"
	proxiedListenersFile = "proxied.listeners"
)

// diskFaults are the faults of chaosFaults that the worker processes inject
// into their own disks: only a test build can (statefaults.go), as
// production code has no such hook.
var diskFaults = []string{"disk-full", "disk-errors"}

// stateFaultsEnv names the control file of the disk faults of a worker's
// Pebble stores (internal/diskfault): the runner sets it for each worker
// process it starts, and only a test build's `run` reads it
// (statefaults.go). It is not a setting, so no flag.
const stateFaultsEnv = "WEIR_STATE_FAULTS"

// defaultChaosFaults are the faults this binary can inject.
func defaultChaosFaults() []string {
	if stateFaults != nil {
		return slices.Clone(chaosFaults)
	}
	return slices.DeleteFunc(slices.Clone(chaosFaults), func(f string) bool { return slices.Contains(diskFaults, f) })
}

type chaosConfig struct {
	Brokers        []string
	KafkaDir       string
	KafkaScript    string
	Dir            string
	Duration       time.Duration
	Workers        int
	Partitions     int
	Rate           int
	Keys           int
	Seed           uint64
	Faults         []string
	SessionTimeout time.Duration
	Interval       time.Duration
	CatchUp        time.Duration
	// MaxRecovery, if set, is the bound on each recovery: a slower one
	// makes the run not clean, and the next fault waits until the job
	// recovered from the last (or the bound passed), so that each
	// recovery is from one fault.
	MaxRecovery time.Duration
}

func (c *chaosConfig) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: "+format, append([]any{flag}, args...)...))
	}
	if c.Duration <= 0 {
		bad("duration", "%v, want more than 0", c.Duration)
	}
	if c.Workers < 1 || c.Workers > 64 {
		bad("workers", "%d, want 1 to 64", c.Workers)
	}
	if c.Partitions < 1 {
		bad("partitions", "%d, want at least 1", c.Partitions)
	}
	if c.Rate < 1 {
		bad("rate", "%d, want at least 1 record per second", c.Rate)
	}
	if c.Keys < 1 {
		bad("keys", "%d, want at least 1", c.Keys)
	}
	if c.SessionTimeout < 6*time.Second {
		bad("session-timeout", "%v, want at least 6s (brokers refuse less: group.min.session.timeout.ms)", c.SessionTimeout)
	}
	if c.Interval <= 0 {
		bad("interval", "%v, want more than 0", c.Interval)
	}
	if c.CatchUp <= 0 {
		bad("catch-up", "%v, want more than 0", c.CatchUp)
	}
	if c.MaxRecovery < 0 {
		bad("max-recovery", "%v, want 0 (no bound) or more", c.MaxRecovery)
	}
	for _, f := range c.Faults {
		if !slices.Contains(chaosFaults, f) {
			bad("faults", "unknown fault %q (known: %s)", f, strings.Join(chaosFaults, ", "))
		}
	}
	for _, f := range c.Faults {
		if slices.Contains(diskFaults, f) && stateFaults == nil {
			bad("faults", "%s needs a test build, whose workers can make their disks fail: go run -tags weirfaults ./cmd/processor chaos", f)
		}
	}
	for _, f := range kafkaLinkFaults {
		if slices.Contains(c.Faults, f) && len(c.Brokers) > 0 && c.KafkaDir == "" {
			bad("faults", "%s needs a broker with a listener per worker, each reached through the worker's own proxy: leave --brokers empty (it starts one) "+
				"or give the --kafka-dir of a scripts/kafka broker started with %s=%d", f, proxiedListenersEnv, c.Workers)
		}
	}
	if slices.Contains(c.Faults, "broker-restart") && len(c.Brokers) > 0 && c.KafkaDir == "" {
		bad("faults", "broker-restart needs a broker the runner can restart: leave --brokers empty (it starts one) or give the --kafka-dir of the scripts/kafka broker at --brokers")
	}
	if len(c.Brokers) == 0 && c.KafkaDir != "" {
		bad("kafka-dir", "%s without --brokers: the runner starts a broker of its own, in its --dir", c.KafkaDir)
	}
	if (len(c.Brokers) == 0 || c.KafkaDir != "") && c.KafkaScript == "" {
		bad("kafka-script", "empty, and the runner starts or restarts the broker with it")
	}
	return errors.Join(errs...)
}

func parseChaos(args []string, lookup func(string) (string, bool), stderr io.Writer) (chaosConfig, error) {
	c := chaosConfig{Duration: 3 * time.Minute, Workers: 3, Partitions: 6, Rate: 1000, Keys: 100,
		Seed: rand.Uint64() % 1_000_000, Faults: defaultChaosFaults(), KafkaScript: "scripts/kafka",
		SessionTimeout: 6 * time.Second, Interval: time.Second, CatchUp: 3 * time.Minute}
	fs := cli.NewFlagSet("processor chaos", "Run the count job on --workers worker processes against a real broker and an S3 server for\n--duration, injecting faults at random one after another, then check the output read_committed\nand print a table: each fault and how often, duplicates, missing, longest recovery, checkpoints\nfailed. Exits 1 unless the output is exactly once and the job recovered from every fault.", stderr)
	fs.Var(cli.List{V: &c.Brokers}, "brokers", "Kafka bootstrap addresses (default: start a broker with --kafka-script in the run's directory)")
	fs.StringVar(&c.KafkaDir, "kafka-dir", c.KafkaDir, "WEIR_KAFKA_DIR of the scripts/kafka broker at --brokers, to restart it (broker-restart)")
	fs.StringVar(&c.KafkaScript, "kafka-script", c.KafkaScript, "the scripts/kafka of this repository, which starts and restarts the broker")
	fs.StringVar(&c.Dir, "dir", c.Dir, "working directory: worker logs, state, the broker (default: a temporary one, removed after a clean run)")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long to inject faults")
	fs.IntVar(&c.Workers, "workers", c.Workers, "worker processes")
	fs.IntVar(&c.Partitions, "partitions", c.Partitions, "input partitions (tasks)")
	fs.IntVar(&c.Rate, "rate", c.Rate, "input records per second, written throughout")
	fs.IntVar(&c.Keys, "keys", c.Keys, "distinct keys of the input")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the fault schedule (default: random, printed)")
	fs.Var(cli.List{V: &c.Faults}, "faults", "faults to inject, comma-separated: "+strings.Join(chaosFaults, ", ")+" ("+strings.Join(diskFaults, " and ")+" only in a build with -tags weirfaults)")
	fs.DurationVar(&c.SessionTimeout, "session-timeout", c.SessionTimeout, "the workers' group session timeout (sigstop pauses a worker past it)")
	fs.DurationVar(&c.Interval, "interval", c.Interval, "the workers' checkpoint interval")
	fs.DurationVar(&c.CatchUp, "catch-up", c.CatchUp, "after the faults, how long the job may take to write the output of all input")
	fs.DurationVar(&c.MaxRecovery, "max-recovery", c.MaxRecovery, "if set, the bound on each recovery (a slower one is a failure); each fault then waits for the recovery from the last")
	if err := cli.Parse(fs, args, lookup); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, cli.UsageError{Err: err}
	}
	return c, nil
}

// chaosReport is what a run found.
type chaosReport struct {
	cfg       chaosConfig
	elapsed   time.Duration
	injected  map[string]int
	verdict   Verdict
	recovered []recovery // one per fault, in order
	declined  int        // checkpoints declined or aborted, from the workers' logs
	restarts  int        // tasks restarted after a failure, from the logs
	exits     []string   // worker processes that exited without being told to: how
	crashes   []string   // panics and data races in the workers' logs
	drains    []string   // workers that did not drain cleanly at the end
	unclean   []string   // drains under the faults that exited non-zero (a task was down)
	produced  int64
	stall     time.Duration // the longest time without new output
	dir       string
	// layout is what partitions-added found; nil if it did not run.
	layout *layoutStop
}

// recovery is how long the job took, after a fault ended, to have written
// the output of every input record acknowledged by then.
type recovery struct {
	fault  string
	ended  time.Time
	target int64 // input records acknowledged when the fault ended
	took   time.Duration
	done   bool
}

func (r chaosReport) clean() bool {
	if !r.verdict.Clean() || r.verdict.In != r.produced || len(r.verdict.Notes) > 0 ||
		len(r.exits) > 0 || len(r.crashes) > 0 || len(r.drains) > 0 {
		return false
	}
	if slices.Contains(r.cfg.Faults, "partitions-added") && (r.layout == nil || r.layout.err != nil) {
		return false
	}
	for _, rc := range r.recovered {
		if !rc.done || r.overBound(rc) {
			return false
		}
	}
	return true
}

func (r chaosReport) overBound(rc recovery) bool {
	return r.cfg.MaxRecovery > 0 && rc.took > r.cfg.MaxRecovery
}

// recoveryStats are the recoveries from one kind of fault.
type recoveryStats struct {
	n             int
	p50, p99, max time.Duration
	over          int // over --max-recovery
}

// byFault sums up the recoveries per fault kind (nearest-rank
// percentiles); a recovery that never ended is not in them (clean says so).
func (r chaosReport) byFault() map[string]recoveryStats {
	took := map[string][]time.Duration{}
	out := map[string]recoveryStats{}
	for _, rc := range r.recovered {
		if !rc.done {
			continue
		}
		took[rc.fault] = append(took[rc.fault], rc.took)
		if r.overBound(rc) {
			s := out[rc.fault]
			s.over++
			out[rc.fault] = s
		}
	}
	for f, ds := range took {
		slices.Sort(ds)
		rank := func(q float64) time.Duration {
			i := int(math.Ceil(q*float64(len(ds)))) - 1
			return ds[max(i, 0)]
		}
		s := out[f]
		s.n, s.p50, s.p99, s.max = len(ds), rank(0.50), rank(0.99), ds[len(ds)-1]
		out[f] = s
	}
	return out
}

func (r chaosReport) longest() recovery {
	var l recovery
	for _, rc := range r.recovered {
		if !rc.done {
			return rc
		}
		if rc.took > l.took {
			l = rc
		}
	}
	return l
}

func (r chaosReport) write(w io.Writer) {
	c := r.cfg
	fmt.Fprintf(w, "chaos: count job, %d workers, %d tasks, %d records/s, seed %d\n", c.Workers, c.Partitions, c.Rate, c.Seed)
	row := func(k string, v any) { fmt.Fprintf(w, "  %-22s %v\n", k, v) }
	row("duration", r.elapsed.Round(time.Second))
	for _, f := range chaosFaults {
		if slices.Contains(c.Faults, f) {
			row("fault "+f, r.injected[f])
		}
	}
	row("records in", r.verdict.In)
	row("records out", r.verdict.Out)
	row("duplicates", r.verdict.Duplicates)
	row("missing", r.verdict.Missing)
	row("wrong sums", r.verdict.WrongTotals)
	if r.verdict.In != r.produced {
		row("input", fmt.Sprintf("%d records acknowledged, %d read back", r.produced, r.verdict.In))
	}
	if l := r.longest(); !l.done && l.fault != "" {
		row("longest recovery", fmt.Sprintf("none: the output never caught up after %s", l.fault))
	} else if l.fault != "" {
		row("longest recovery", fmt.Sprintf("%v (after %s)", l.took.Round(10*time.Millisecond), l.fault))
	}
	row("longest output stall", r.stall.Round(10*time.Millisecond))
	if slices.Contains(c.Faults, "partitions-added") {
		switch {
		case r.layout == nil:
			row("partitions added", "not tried: the output never caught up")
		case r.layout.err != nil:
			row("partitions added", r.layout.err)
		default:
			row("partitions added", fmt.Sprintf("every worker stopped the job loudly within %v (reason %s)",
				r.layout.took.Round(10*time.Millisecond), layoutStopReason))
		}
	}
	if len(r.recovered) > 0 {
		bound := "no bound"
		if r.cfg.MaxRecovery > 0 {
			bound = fmt.Sprintf("bound %v", r.cfg.MaxRecovery)
		}
		fmt.Fprintf(w, "  recovery by fault (%s):\n", bound)
		stats := r.byFault()
		for _, f := range chaosFaults {
			s, ok := stats[f]
			if !ok {
				continue
			}
			line := fmt.Sprintf("    %-16s n %-3d p50 %-8v p99 %-8v max %v", f, s.n,
				s.p50.Round(10*time.Millisecond), s.p99.Round(10*time.Millisecond), s.max.Round(10*time.Millisecond))
			if s.over > 0 {
				line += fmt.Sprintf("  (%d over the bound)", s.over)
			}
			fmt.Fprintln(w, line)
		}
	}
	row("checkpoints failed", r.declined)
	row("task restarts", r.restarts)
	row("worker exits", fmt.Sprintf("%d not asked for (each started again)", len(r.exits)))
	for _, e := range r.exits {
		fmt.Fprintln(w, "    exit:", e)
	}
	row("crashes", len(r.crashes))
	for _, e := range r.crashes {
		fmt.Fprintln(w, "    crash:", e)
	}
	if len(r.unclean) > 0 {
		row("drains exiting 1", fmt.Sprintf("%d (sigterm while a task was down after an earlier fault)", len(r.unclean)))
	}
	if len(r.drains) > 0 {
		row("failed final drains", strings.Join(r.drains, "; "))
	}
	verdict := "clean: exactly once, recovered from every fault"
	if !r.clean() {
		verdict = "NOT CLEAN"
	}
	row("verdict", verdict)
	for _, n := range r.verdict.Notes {
		fmt.Fprintln(w, "  note (not clean: the output has transactions still open):", n)
	}
	if !r.clean() && r.dir != "" {
		fmt.Fprintln(w, "  logs in", r.dir)
	}
}

func chaosCommand(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	c, err := parseChaos(args, lookup, stderr)
	if err != nil {
		return err
	}
	r, err := runChaos(ctx, c, stderr)
	if r != nil {
		r.write(stdout)
	}
	if err != nil {
		return err
	}
	if !r.clean() {
		return errors.New("chaos: not exactly once, or the job did not recover")
	}
	return nil
}

// chaos is one run's machinery.
type chaos struct {
	c       chaosConfig
	log     io.Writer
	logMu   sync.Mutex
	dir     string
	bin     string
	brokers []string
	kafka   string       // WEIR_KAFKA_DIR of a broker the runner may restart; "" for none
	s3mode  atomic.Value // string: "", "errors", "latency"
	workers []*chaosWorker
	exitMu  sync.Mutex
	exits   []string

	name     string // the job instance
	in, out  string
	acked    atomic.Int64
	outN     atomic.Int64
	stall    atomic.Int64 // the longest gap between output records read, ns
	mu       sync.Mutex
	pending  []*recovery
	unclean  []string // drains under the faults that exited non-zero
	injected map[string]int
}

func (ch *chaos) logf(format string, args ...any) {
	ch.logMu.Lock() // the supervisors log too, and ch.log may be a buffer
	defer ch.logMu.Unlock()
	fmt.Fprintf(ch.log, "chaos: %s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

func runChaos(ctx context.Context, c chaosConfig, stderr io.Writer) (*chaosReport, error) {
	bin, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir := c.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "weir-chaos-"); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Registered first, so run last: after the broker in dir stopped.
	var removeDir bool
	defer func() {
		if removeDir {
			os.RemoveAll(dir)
		}
	}()
	ch := &chaos{c: c, log: stderr, dir: dir, bin: bin, brokers: c.Brokers, kafka: c.KafkaDir, injected: map[string]int{}}
	ch.s3mode.Store("")
	// The seed fixes the schedule; the suffix lets a seed run again on
	// the same broker.
	var suffix [3]byte
	_, _ = cryptorand.Read(suffix[:])
	name := fmt.Sprintf("chaos-%d-%x", c.Seed, suffix)
	ch.name = name
	ch.in, ch.out = name+"-in", name+"-out"
	ch.logf("seed %d, working in %s", c.Seed, dir)

	if len(ch.brokers) == 0 {
		ch.kafka = filepath.Join(dir, "kafka")
		addr, err := ch.script("start")
		if err != nil {
			return nil, err
		}
		defer func() {
			if _, err := ch.script("stop"); err != nil {
				ch.logf("stopping the broker: %v", err)
			}
		}()
		ch.brokers = []string{addr}
	}

	// S3: an in-memory S3 server on a 127.0.0.1 port, spoken to over real
	// HTTP through a fault proxy per worker: the S3 faults act on all of
	// them, a cut on one worker's alone.
	s3, err := startDemoS3(ctx)
	if err != nil {
		return nil, err
	}
	defer s3.close()

	if err := ch.createTopics(ctx); err != nil {
		return nil, err
	}
	listeners, err := ch.proxiedListeners()
	if err != nil {
		return nil, err
	}
	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	for i := range c.Workers {
		w := &chaosWorker{ch: ch, i: i, faults: filepath.Join(dir, fmt.Sprintf("faults-w%d", i))}
		rng := rand.New(rand.NewPCG(c.Seed, uint64(1+i)))
		proxy, err := faultproxy.Start(s3.endpoint, faultproxy.Options{Seed: c.Seed + uint64(i), DelayFor: 400 * time.Millisecond,
			Decide: func(_ *http.Request, _ int) faultproxy.Fault {
				if w.s3cut.Load() {
					return faultproxy.Stall // a partition: no answer, until the client gives up
				}
				return ch.s3fault(rng)
			}})
		if err != nil {
			return nil, err
		}
		defer proxy.Close()
		proxy.Enable(true)
		w.s3uri = "s3://" + demoBucket + "/" + name + "?" + url.Values{
			"endpoint": {proxy.URL}, "region": {"us-east-1"}, "path_style": {"true"}}.Encode()
		w.brokers = ch.brokers
		if i < len(listeners) {
			// The worker's own way to the broker: a proxy at the address
			// its listener advertises, so that every connection the
			// worker's clients make, bootstrap and metadata-learned
			// alike, goes through it.
			kp, err := faultproxy.ListenTCP(listeners[i].advertised, listeners[i].bound, c.Seed+uint64(100+i))
			if err != nil {
				return nil, fmt.Errorf("worker %d's Kafka proxy: %w", i, err)
			}
			defer kp.Close()
			w.kafka, w.brokers = kp, []string{kp.Addr}
		}
		ch.workers = append(ch.workers, w)
		if err := w.start(); err != nil {
			return nil, err
		}
	}
	defer ch.stopWorkers(false) // on an early return; at the end they stopped already

	produced := make(chan error, 1)
	prodCtx, stopProducing := context.WithCancel(runCtx)
	defer stopProducing()
	go func() { produced <- ch.produce(prodCtx) }()
	readDone := make(chan error, 1)
	go func() { readDone <- ch.read(runCtx) }()

	start := time.Now()
	faultRng := rand.New(rand.NewPCG(c.Seed, 2))
	mixed := slices.DeleteFunc(slices.Clone(c.Faults), func(f string) bool { return slices.Contains(lastFaults, f) })
	for time.Since(start) < c.Duration && ctx.Err() == nil {
		ch.awaitRecovery(ctx)
		select {
		case err := <-readDone:
			return nil, fmt.Errorf("reading the output: %w", err)
		case <-time.After(time.Duration(2000+faultRng.IntN(3000)) * time.Millisecond):
		case <-ctx.Done():
		}
		if time.Since(start) >= c.Duration || ctx.Err() != nil {
			break
		}
		if len(mixed) == 0 {
			sleep(ctx, c.Duration-time.Since(start))
			break
		}
		f := mixed[faultRng.IntN(len(mixed))]
		if err := ch.inject(ctx, f, faultRng); err != nil {
			return nil, fmt.Errorf("fault %s: %w", f, err)
		}
	}
	elapsed := time.Since(start)
	stopProducing()
	if err := <-produced; err != nil {
		return nil, fmt.Errorf("writing the input: %w", err)
	}
	total := ch.acked.Load()
	ch.logf("faults over after %v; %d input records acknowledged; waiting up to %v for their output", elapsed.Round(time.Second), total, c.CatchUp)
	deadline := time.Now().Add(c.CatchUp)
	for ch.outN.Load() < total && time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case err := <-readDone:
			return nil, fmt.Errorf("reading the output: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	var layout *layoutStop
	if slices.Contains(c.Faults, "partitions-added") && ch.outN.Load() >= total {
		layout = ch.addPartitions(ctx)
	}
	// Every worker drains (final checkpoint, commit, leave the group) and
	// must exit 0, or 1 if the job stopped on it for its layout; then every
	// transaction on the output must have ended, so that what verify reads
	// is all there will ever be.
	ch.logf("stopping the workers")
	drains := ch.stopWorkers(layout != nil && layout.err == nil)
	stopAll()
	<-readDone
	if err := ch.waitStable(ctx, 2*time.Minute); err != nil {
		ch.logf("%v", err)
	}

	vctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	v, err := verify(vctx, ch.brokers, "count", ch.in, ch.out)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	ch.exitMu.Lock()
	exits := slices.Clone(ch.exits)
	ch.exitMu.Unlock()
	r := &chaosReport{cfg: c, elapsed: elapsed, injected: ch.injected, verdict: v, produced: total, exits: exits,
		drains: drains, stall: time.Duration(ch.stall.Load()), dir: dir, layout: layout}
	ch.mu.Lock()
	for _, p := range ch.pending {
		r.recovered = append(r.recovered, *p)
	}
	r.unclean = slices.Clone(ch.unclean)
	ch.mu.Unlock()
	r.declined, r.restarts, r.crashes = ch.scanLogs()
	removeDir = r.clean() && c.Dir == ""
	return r, nil
}

// s3fault is the proxy's decision for one request under the current S3
// fault: errors fail a third of requests (500s, resets before and after
// the server did the work, bodies cut short); latency delays every
// request and stalls one in a hundred until the client gives up.
func (ch *chaos) s3fault(rng *rand.Rand) faultproxy.Fault {
	switch ch.s3mode.Load().(string) {
	case "errors":
		switch x := rng.IntN(12); {
		case x == 0:
			return faultproxy.Error500
		case x == 1:
			return faultproxy.Reset
		case x == 2:
			return faultproxy.ResetAfter
		case x == 3:
			return faultproxy.Truncate
		}
	case "latency":
		if rng.IntN(100) == 0 {
			return faultproxy.Stall
		}
		return faultproxy.Delay
	}
	return faultproxy.Pass
}

// script runs the Kafka script with the runner's broker directory and
// returns what it printed (the broker's address).
func (ch *chaos) script(args ...string) (string, error) {
	cmd := exec.Command(ch.c.KafkaScript, args...)
	// The listeners per worker matter to start only; a broker the runner
	// did not start has what it was started with.
	cmd.Env = append(os.Environ(), "WEIR_KAFKA_DIR="+ch.kafka, fmt.Sprintf("%s=%d", proxiedListenersEnv, ch.c.Workers))
	f, err := os.OpenFile(filepath.Join(ch.dir, "kafka-script.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return "", err
	}
	defer f.Close()
	cmd.Stderr = f
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w (see %s)", ch.c.KafkaScript, strings.Join(args, " "), err, f.Name())
	}
	return strings.TrimSpace(string(out)), nil
}

// proxiedListener is one of the broker's listeners per worker: bound is
// where the broker listens, advertised where it tells clients to connect,
// the worker's proxy.
type proxiedListener struct{ bound, advertised string }

// proxiedListeners reads the broker's listeners per worker, which the Kafka
// link faults need one of per worker; none if the broker has none and no
// such fault is asked for.
func (ch *chaos) proxiedListeners() ([]proxiedListener, error) {
	var ls []proxiedListener
	if ch.kafka != "" {
		b, err := os.ReadFile(filepath.Join(ch.kafka, proxiedListenersFile))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) == 2 {
				ls = append(ls, proxiedListener{bound: f[0], advertised: f[1]})
			}
		}
	}
	for _, f := range kafkaLinkFaults {
		if slices.Contains(ch.c.Faults, f) && len(ls) < ch.c.Workers {
			return nil, fmt.Errorf("--faults %s: the broker in %s has %d listeners per worker (%s), want %d: start it with %s=%d, "+
				"or leave --brokers empty and the runner starts one", f, ch.kafka, len(ls), proxiedListenersFile, ch.c.Workers, proxiedListenersEnv, ch.c.Workers)
		}
	}
	return ls, nil
}

func (ch *chaos) createTopics(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(ch.brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, int32(ch.c.Partitions), -1, nil, ch.in, ch.out)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	return nil
}

// produce writes the input at the rate until ctx ends: key k<i%keys>,
// value i, as `processor generate` writes it. The client retries through
// broker restarts; acked counts what the broker acknowledged. A broker
// starting up can close a connection before it answers, which franz-go
// takes for a TLS or SASL mismatch and does not retry unless told to: it
// failed a record of the input (and so the run) once in a 15-minute run
// with broker restarts (seed 25002). The producer is idempotent, so a
// retry writes nothing twice.
func (ch *chaos) produce(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(ch.brokers...), kgo.DefaultProduceTopic(ch.in), kgo.ProducerLinger(5*time.Millisecond),
		kgo.AlwaysRetryEOF())
	if err != nil {
		return err
	}
	defer cl.Close()
	var failed atomic.Value
	start := time.Now()
	var i int64
	for ctx.Err() == nil {
		due := int64(time.Since(start).Seconds() * float64(ch.c.Rate))
		for ; i < due && ctx.Err() == nil; i++ {
			r := &kgo.Record{Key: []byte("k" + strconv.FormatInt(i%int64(ch.c.Keys), 10)), Value: strconv.AppendInt(nil, i, 10)}
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err == nil {
					ch.acked.Add(1)
				} else if !errors.Is(err, context.Canceled) {
					failed.CompareAndSwap(nil, err)
				}
			})
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	// What was handed to the client is written, or the run has no count
	// to check against.
	fctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cl.Flush(fctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	return nil
}

// read counts the output read_committed until ctx ends, and ends the
// recoveries whose input it has caught up with.
func (ch *chaos) read(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(ch.brokers...), kgo.ConsumeTopics(ch.out),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	var last time.Time // the last output read; stalls count from the first
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		// Fetch errors through a broker restart are the client's to retry.
		got := int64(fs.NumRecords())
		if got == 0 {
			continue
		}
		ch.outN.Add(got)
		now := time.Now()
		if gap := int64(now.Sub(last)); !last.IsZero() && gap > ch.stall.Load() {
			ch.stall.Store(gap)
		}
		last = now
		ch.mu.Lock()
		ch.settle(now)
		ch.mu.Unlock()
	}
}

// awaitRecovery waits, under --max-recovery, until the job recovered from
// every fault so far or the bound passed since the last one ended.
func (ch *chaos) awaitRecovery(ctx context.Context) {
	if ch.c.MaxRecovery <= 0 {
		return
	}
	for ctx.Err() == nil {
		ch.mu.Lock()
		waiting := false
		for _, p := range ch.pending {
			if !p.done && time.Since(p.ended) < ch.c.MaxRecovery {
				waiting = true
			}
		}
		ch.mu.Unlock()
		if !waiting {
			return
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// settle ends the recoveries the output has caught up with; ch.mu held.
func (ch *chaos) settle(now time.Time) {
	n := ch.outN.Load()
	for _, p := range ch.pending {
		if !p.done && n >= p.target {
			p.done, p.took = true, now.Sub(p.ended)
		}
	}
}

// waitStable waits until no transaction is open on the output: each
// partition's last stable offset is its end.
func (ch *chaos) waitStable(ctx context.Context, limit time.Duration) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(ch.brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(limit)
	for {
		stable, err1 := adm.ListCommittedOffsets(ctx, ch.out) // the last stable offsets
		ends, err2 := adm.ListEndOffsets(ctx, ch.out)         // the high watermarks
		if err := errors.Join(err1, err2); err == nil {
			open := 0
			ends.Each(func(o kadm.ListedOffset) {
				if s, ok := stable.Lookup(o.Topic, o.Partition); !ok || s.Offset != o.Offset {
					open++
				}
			})
			if open == 0 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d output partitions still have open transactions after %v", open, limit)
			}
		} else if time.Now().After(deadline) {
			return err
		}
		sleep(ctx, 500*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// inject applies fault f and returns when it is over (the worker
// restarted or resumed, the broker back, S3 and the disk healthy again).
func (ch *chaos) inject(ctx context.Context, f string, rng *rand.Rand) error {
	w := ch.workers[rng.IntN(len(ch.workers))]
	span := time.Duration(5000+rng.IntN(7000)) * time.Millisecond
	var (
		delay time.Duration
		loss  float64
	)
	switch f {
	case "sigkill", "sigterm", "sigstop":
		ch.logf("inject %s (worker %d)", f, w.i)
	case "broker-restart":
		ch.logf("inject %s", f)
	case "state-wipe":
		ch.logf("inject %s (worker %d)", f, w.i)
	case "s3-errors", "s3-latency":
		ch.logf("inject %s (%v)", f, span.Round(time.Millisecond))
	case "s3-cut", "kafka-cut", "net-cut":
		span = ch.c.SessionTimeout + time.Duration(1000+rng.IntN(4000))*time.Millisecond
		ch.logf("inject %s (worker %d, %v)", f, w.i, span.Round(time.Millisecond))
	case "kafka-slow":
		span = ch.c.SessionTimeout + time.Duration(1000+rng.IntN(4000))*time.Millisecond
		delay, loss = time.Duration(50+rng.IntN(350))*time.Millisecond, 0.01+0.09*rng.Float64()
		ch.logf("inject %s (worker %d, %v: %v each way, %.0f%% of chunks stalled 0.2-2 s)", f, w.i, span.Round(time.Millisecond),
			delay, 100*loss)
	default:
		ch.logf("inject %s (worker %d, %v)", f, w.i, span.Round(time.Millisecond))
	}
	switch f {
	case "sigkill":
		if err := w.stop(syscall.SIGKILL, time.Minute); err != nil {
			return err
		}
		sleep(ctx, time.Duration(500+rng.IntN(2500))*time.Millisecond)
		if err := w.start(); err != nil {
			return err
		}
	case "sigterm":
		// A drain: final checkpoint and commit, then the worker leaves
		// the group; a supervisor starts it again. A drain that finds a
		// task down after an earlier fault (between its restarts) has no
		// final checkpoint to take and exits 1, as it should: noted, and
		// the task's next owner restores its last checkpoint. A drain
		// that hangs is a failure.
		if err := w.stop(syscall.SIGTERM, time.Minute); err != nil {
			var code *drainExit
			if !errors.As(err, &code) {
				return err
			}
			ch.logf("%v", err)
			ch.mu.Lock()
			ch.unclean = append(ch.unclean, err.Error())
			ch.mu.Unlock()
		}
		sleep(ctx, time.Duration(500+rng.IntN(2000))*time.Millisecond)
		if err := w.start(); err != nil {
			return err
		}
	case "sigstop":
		// Paused past its session timeout: the group gives its tasks to
		// others, and when it wakes it is a zombie that must be fenced.
		if err := w.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		sleep(ctx, ch.c.SessionTimeout+time.Duration(1000+rng.IntN(4000))*time.Millisecond)
		if err := w.signal(syscall.SIGCONT); err != nil {
			return err
		}
	case "broker-restart":
		how := ""
		if rng.IntN(2) == 0 {
			how = "kill"
		}
		if _, err := ch.script("restart", how); err != nil {
			return err
		}
	case "s3-errors", "s3-latency":
		ch.s3mode.Store(strings.TrimPrefix(f, "s3-"))
		sleep(ctx, span)
		ch.s3mode.Store("")
	case "s3-cut":
		// One worker cut off from S3 while its process and its link to
		// Kafka live, past the session timeout: it keeps its tasks, which
		// cannot checkpoint or restore until the link heals.
		w.s3cut.Store(true)
		sleep(ctx, span)
		w.s3cut.Store(false)
	case "kafka-cut":
		// A worker alive and cut off from Kafka past its session timeout:
		// the group gives its tasks to the others, whose owners fence its
		// transactions; it still reaches S3. At the heal it is a zombie
		// that learns it lost its tasks from the group.
		w.kafka.Cut(true)
		sleep(ctx, span)
		w.kafka.Cut(false)
	case "net-cut":
		// Cut off from both, as a worker's host off the network.
		w.kafka.Cut(true)
		w.s3cut.Store(true)
		sleep(ctx, span)
		w.kafka.Cut(false)
		w.s3cut.Store(false)
	case "kafka-slow":
		// A slow, lossy link to Kafka: every chunk late, some stalled as
		// lost segments are. Requests slow down or time out; nothing is
		// cut.
		w.kafka.Link(delay, loss)
		sleep(ctx, span)
		w.kafka.Link(0, 0)
	case "state-wipe":
		// The worker's state directory deleted under it while it runs, as
		// a cleanup script or a volume mounted again empty would: its
		// stores lose their files (open ones stay readable until
		// closed), and what it writes next fails.
		if err := w.wipeState(); err != nil {
			return err
		}
	case "disk-full", "disk-errors":
		if err := w.setDiskFault(map[string]string{"disk-full": "enospc", "disk-errors": "eio"}[f]); err != nil {
			return err
		}
		sleep(ctx, span)
		if err := w.setDiskFault(""); err != nil {
			return err
		}
	}
	ch.mu.Lock()
	ch.injected[f]++
	ch.pending = append(ch.pending, &recovery{fault: f, ended: time.Now(), target: ch.acked.Load()})
	ch.settle(time.Now())
	ch.mu.Unlock()
	return nil
}

// layoutStopReason is the reason a worker logs when the job stops on it
// because its input gained partitions (worker/layout.go).
const layoutStopReason = "partitions_changed"

// layoutStop is what adding partitions to the running job's input did.
type layoutStop struct {
	took time.Duration // until the last worker logged the stop
	err  error         // a worker that did not stop loudly in time
}

// addPartitions adds two partitions to the input of the running job, whose
// output caught up, and waits for every worker to stop the job with the
// reason partitions_changed: the loud refusal of a layout its state and
// offsets do not belong to (worker/layout.go). Nothing is written to the
// input after, so the output stays checkable: exactly once for all input.
// Each worker must stop within its layout check interval (30 s by
// default; a rebalance for the new partitions may find it sooner) and 15 s.
func (ch *chaos) addPartitions(ctx context.Context) *layoutStop {
	const bound = 45 * time.Second
	before := make([]int, len(ch.workers))
	for i, w := range ch.workers {
		before[i] = w.countLog(layoutStopLine)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(ch.brokers...))
	if err != nil {
		return &layoutStop{err: err}
	}
	defer cl.Close()
	ch.logf("inject partitions-added: %s from %d to %d partitions", ch.in, ch.c.Partitions, ch.c.Partitions+2)
	resp, err := kadm.NewClient(cl).CreatePartitions(ctx, 2, ch.in)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return &layoutStop{err: fmt.Errorf("adding partitions: %w", err)}
	}
	start := time.Now()
	for {
		waiting := []string{}
		for i, w := range ch.workers {
			if w.countLog(layoutStopLine) <= before[i] {
				waiting = append(waiting, w.name())
			}
		}
		if len(waiting) == 0 {
			ch.injected["partitions-added"]++
			ch.logf("every worker stopped the job after %v", time.Since(start).Round(time.Millisecond))
			return &layoutStop{took: time.Since(start)}
		}
		if time.Since(start) > bound || ctx.Err() != nil {
			return &layoutStop{err: fmt.Errorf("%s did not stop the job (reason %s) within %v of the partitions added",
				strings.Join(waiting, ", "), layoutStopReason, bound)}
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// layoutStopLine matches the log line of a job stopped for partitions added.
func layoutStopLine(line string) bool {
	return strings.Contains(line, `msg="job stopped on this worker`) && strings.Contains(line, "reason="+layoutStopReason)
}

// countLog counts the lines of the worker's log that match.
func (w *chaosWorker) countLog(match func(string) bool) int {
	b, err := os.ReadFile(w.logPath())
	if err != nil {
		return 0
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		if match(line) {
			n++
		}
	}
	return n
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// stopWorkers drains every worker (SIGCONT first, in case one is paused)
// and says which did not exit 0 within the grace; with jobStopped, an
// exit 1 is what a worker whose job stopped for its layout does.
func (ch *chaos) stopWorkers(jobStopped bool) []string {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		bad []string
	)
	for _, w := range ch.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.signal(syscall.SIGCONT)
			err := w.stop(syscall.SIGTERM, 30*time.Second)
			var code *drainExit
			if jobStopped && errors.As(err, &code) && code.code == 1 {
				err = nil
			}
			if err != nil {
				mu.Lock()
				bad = append(bad, err.Error())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(bad)
	return bad
}

// scanLogs reads the workers' logs for checkpoints that failed (declined
// by a task or aborted: counted once per task incarnation and
// checkpoint), tasks restarted after a failure, and crashes: Go's panics
// and the race detector's reports.
func (ch *chaos) scanLogs() (failed, restarts int, crashes []string) {
	seen := map[string]bool{}
	for _, w := range ch.workers {
		b, err := os.ReadFile(w.logPath())
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			switch {
			case strings.Contains(line, `msg="checkpoint declined"`), strings.Contains(line, `msg="checkpoint aborted"`):
				// The coordinator and the task both log an abort; the
				// task's line carries the epoch of its incarnation.
				epoch, ok := logAttr(line, "epoch")
				task, _ := logAttr(line, "task")
				id, _ := logAttr(line, "checkpoint")
				if key := w.name() + "/" + task + "/" + epoch + "/" + id; ok && !seen[key] {
					seen[key] = true
					failed++
				}
			case strings.Contains(line, `msg="task failed, restarting"`):
				restarts++
			case strings.HasPrefix(line, "panic: "), strings.HasPrefix(line, "fatal error: "), strings.HasPrefix(line, "WARNING: DATA RACE"):
				crashes = append(crashes, fmt.Sprintf("worker %d: %s", w.i, strings.TrimSpace(line)))
			}
		}
	}
	return failed, restarts, crashes
}

// logAttr is the value of key=value in a text log line.
func logAttr(line, key string) (string, bool) {
	_, v, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return "", false
	}
	v, _, _ = strings.Cut(v, " ")
	return v, true
}

// chaosWorker is one worker process slot: the runner starts, stops and
// signals it; a process that exits on its own is started again after a
// second, as a supervisor (systemd, Kubernetes, compose's restart policy)
// would, and counted.
type chaosWorker struct {
	ch     *chaos
	i      int
	faults string // its disk faults' control file (statefaults_weirfaults.go)

	// op serialises starting and stopping, so that a supervisor's restart
	// never overlaps the runner's stop or start of the same slot: a
	// process started in between would run on, unsignalled, holding the
	// slot's state directory.
	op      sync.Mutex
	mu      sync.Mutex // guards the fields below, for signal
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool   // the runner stopped it: do not restart
	fault   string // the disk fault on now, kept across restarts

	s3uri string      // its checkpoints, through its own fault proxy
	s3cut atomic.Bool // its proxy answers nothing (s3-cut)
	// brokers is its bootstrap address: its Kafka proxy's, if it has one.
	brokers []string
	kafka   *faultproxy.TCP // its link to the broker; nil without listeners per worker
}

// drainExit is a drain (SIGTERM) that ended with a non-zero exit.
type drainExit struct {
	worker int
	state  string
	code   int
}

func (e *drainExit) Error() string {
	return fmt.Sprintf("worker %d: drain ended with %s", e.worker, e.state)
}

func (w *chaosWorker) name() string { return fmt.Sprintf("w%d", w.i) }

func (w *chaosWorker) stateDir() string { return filepath.Join(w.ch.dir, "state", w.name()) }

// wipeState deletes the worker's state directory while it runs. A store
// may create a file in it meanwhile, which fails the removal of its
// directory: then again.
func (w *chaosWorker) wipeState() error {
	var err error
	for range 20 {
		if err = os.RemoveAll(w.stateDir()); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

func (w *chaosWorker) logPath() string {
	return filepath.Join(w.ch.dir, fmt.Sprintf("worker-%d.log", w.i))
}

// setDiskFault writes the worker's fault control file.
func (w *chaosWorker) setDiskFault(f string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fault = f
	return os.WriteFile(w.faults, []byte(f), 0o644)
}

func (w *chaosWorker) start() error {
	w.op.Lock()
	defer w.op.Unlock()
	return w.startLocked()
}

// startLocked starts the worker's process; w.op held.
func (w *chaosWorker) startLocked() error {
	ch, c := w.ch, w.ch.c
	f, err := os.OpenFile(w.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	w.mu.Lock()
	fault := w.fault
	w.mu.Unlock()
	if err := os.WriteFile(w.faults, []byte(fault), 0o644); err != nil {
		return err
	}
	cmd := exec.Command(ch.bin, "run", "--job", "count", "--name", ch.name,
		"--brokers", strings.Join(w.brokers, ","), "--input", ch.in, "--output", ch.out,
		"--checkpoints", w.s3uri, "--state-dir", w.stateDir(),
		"--state-backend", "pebble", "--delivery", "exactly-once",
		"--interval", c.Interval.String(), "--session-timeout", c.SessionTimeout.String(),
		"--heartbeat-interval", (c.SessionTimeout / 6).String(), "--http-addr", "off")
	// The runner's own WEIR_ settings are not the workers': a stray
	// WEIR_STATE_BACKEND or WEIR_CONFIG would change what is tested.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WEIR_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if stateFaults != nil {
		cmd.Env = append(cmd.Env, stateFaultsEnv+"="+w.faults)
	}
	cmd.Env = append(cmd.Env,
		"AWS_ACCESS_KEY_ID=weir", "AWS_SECRET_ACCESS_KEY=weir-chaos", "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true")
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	w.mu.Lock()
	w.cmd, w.exited, w.stopped = cmd, exited, false
	w.mu.Unlock()
	go w.supervise(cmd, exited)
	return nil
}

// supervise waits for cmd to exit and, unless the runner stopped it,
// records the exit and starts the slot again a second later.
func (w *chaosWorker) supervise(cmd *exec.Cmd, exited chan struct{}) {
	err := cmd.Wait()
	close(exited)
	w.mu.Lock()
	mine := !w.stopped && w.cmd == cmd
	w.mu.Unlock()
	if !mine {
		return
	}
	ch := w.ch
	ch.exitMu.Lock()
	ch.exits = append(ch.exits, fmt.Sprintf("worker %d at %s: %v", w.i, time.Now().Format("15:04:05"), err))
	ch.exitMu.Unlock()
	ch.logf("worker %d exited on its own (%v); starting it again", w.i, err)
	time.Sleep(time.Second)
	w.op.Lock()
	defer w.op.Unlock()
	w.mu.Lock()
	again := !w.stopped && w.cmd == cmd
	w.mu.Unlock()
	if again {
		if err := w.startLocked(); err != nil {
			ch.logf("worker %d: start: %v", w.i, err)
		}
	}
}

func (w *chaosWorker) signal(sig syscall.Signal) error {
	w.op.Lock()
	defer w.op.Unlock()
	w.mu.Lock()
	cmd, exited := w.cmd, w.exited
	w.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// stop sends sig and waits for the process to exit, with SIGKILL after
// grace. After a SIGTERM (a drain) it must have exited 0.
func (w *chaosWorker) stop(sig syscall.Signal, grace time.Duration) error {
	w.op.Lock()
	defer w.op.Unlock()
	w.mu.Lock()
	w.stopped = true
	cmd, exited := w.cmd, w.exited
	w.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil // stopped already (a second stop at the end)
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-exited:
		if sig == syscall.SIGTERM && !cmd.ProcessState.Success() {
			return &drainExit{worker: w.i, state: cmd.ProcessState.String(), code: cmd.ProcessState.ExitCode()}
		}
		return nil
	case <-time.After(grace):
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("worker %d ignored %v for %v; killed", w.i, sig, grace)
}
