package kafkabench

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/nexmark"
	"github.com/weirstream/weir/internal/proc"
)

// NexmarkAnchors are published per-core throughputs (events/s per core)
// of Nexmark queries: Flink 1.13's, from the Nexmark benchmark's results
// page, which the issue quotes.
var NexmarkAnchors = map[string]float64{"q0": 155e3, "q1": 158e3, "q2": 175e3, "q5": 22e3, "q7": 12e3, "q8": 146e3}

// NexmarkConfig says what the Nexmark runs measure.
type NexmarkConfig struct {
	Queries   []string // q0, q1, ...: jobs nexmark-<q> of the processor
	Events    int64    // events in the input [2,000,000]
	EventRate int      // events per second of event time [1,000,000]
	Runs      int      // runs of each query, its median reported [3]
}

// NexmarkRun is one query's run over the whole input. Its figures are
// of the steady state: from the first checkpoint that had taken in a
// tenth of the events (as the job's lag group shows it) to the one that
// had taken in all, leaving out the worker's start (as Nexmark's own
// throughput monitor does).
type NexmarkRun struct {
	Query  string
	Events int64 // taken in between the two checkpoints
	// Elapsed is the time between them.
	Elapsed time.Duration
	// CPU is the worker process's user and system time between them.
	CPU time.Duration
	// Total is the time from the worker's start to the last.
	Total time.Duration
}

// PerSecond is the events per second of wall time.
func (r NexmarkRun) PerSecond() float64 { return float64(r.Events) / r.Elapsed.Seconds() }

// PerCore is the events per CPU second of the worker: per core.
func (r NexmarkRun) PerCore() float64 { return float64(r.Events) / r.CPU.Seconds() }

// Nexmark writes nc.Events Nexmark events (Beam's generator, keyed as
// nexmark.Encode keys them) into a topic of cfg.Partitions partitions,
// then runs each query's job on them, one after another, in one `processor
// run` process (the binary bin) with every task: exactly-once, Pebble
// state, file:// checkpoints every cfg.Interval. A run ends once the
// job's checkpoints have taken in every event; its figure counts the
// worker's CPU time, as Nexmark's throughput per core does. Each run's
// topics are deleted after it, the input at the end.
func Nexmark(ctx context.Context, cfg Config, nc NexmarkConfig, bin string) (Throughput, []NexmarkRun, error) {
	if nc.Events == 0 {
		nc.Events = 2_000_000
	}
	if nc.EventRate == 0 {
		nc.EventRate = 1_000_000
	}
	if nc.Runs == 0 {
		nc.Runs = 3
	}
	if len(nc.Queries) == 0 || nc.Events < 0 || nc.Runs < 0 {
		return Throughput{}, nil, fmt.Errorf("kafkabench: bad nexmark settings %+v", nc)
	}
	cfg.Records = nc.Events
	b, done, err := newBench(cfg)
	if err != nil {
		return Throughput{}, nil, err
	}
	defer done()
	in := b.topic("nexmark-in")
	if err := b.create(ctx, in); err != nil {
		return Throughput{}, nil, err
	}
	defer b.deleteTopics(in)
	b.log.Info("generating nexmark events", "topic", in, "events", nc.Events, "partitions", b.cfg.Partitions)
	gen, err := b.generateNexmark(ctx, in, nc)
	if err != nil {
		return gen, nil, fmt.Errorf("generate: %w", err)
	}
	// Round after round, so that drift on the machine (the broker's
	// page cache, its log cleaner) falls on every query alike.
	var runs []NexmarkRun
	for k := range nc.Runs {
		for _, q := range nc.Queries {
			r, err := b.nexmarkRun(ctx, bin, in, q, k)
			if err != nil {
				return gen, runs, fmt.Errorf("%s: %w", q, err)
			}
			b.log.Info("nexmark run", "query", q, "run", k+1, "events_per_s", int(r.PerSecond()), "events_per_core_s", int(r.PerCore()))
			runs = append(runs, r)
		}
	}
	return gen, runs, nil
}

func (b *bench) generateNexmark(ctx context.Context, topic string, nc NexmarkConfig) (Throughput, error) {
	gc := nexmark.DefaultConfig(time.Now().Truncate(time.Second))
	gc.EventsPerSecond = nc.EventRate
	g, err := nexmark.NewGenerator(gc)
	if err != nil {
		return Throughput{}, err
	}
	// Uncompressed, as Kafka's own producer writes by default (the
	// workers write so too).
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.cfg.Brokers...), kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		return Throughput{}, err
	}
	defer cl.Close()
	var p promises
	start := time.Now()
	for i := range nc.Events {
		r, err := nexmark.Encode(g.Event(i))
		if err != nil {
			return Throughput{}, err
		}
		r.Topic = topic
		cl.Produce(ctx, r, p.promise)
	}
	if err := cl.Flush(ctx); err != nil {
		return Throughput{}, err
	}
	return Throughput{Name: "generate nexmark events (plain producer)", Records: nc.Events, Elapsed: time.Since(start)}, p.failed()
}

func (b *bench) nexmarkRun(ctx context.Context, bin, in, query string, run int) (NexmarkRun, error) {
	name := fmt.Sprintf("nexmark-%s-%d-%s", query, run, b.suffix)
	out := b.topic(fmt.Sprintf("nexmark-%s-%d-out", query, run))
	if err := b.create(ctx, out); err != nil {
		return NexmarkRun{}, err
	}
	// Its output and internal topics go with the run: a full benchmark
	// writes tens of gigabytes.
	defer b.deleteTopics(out, name+"-")
	ends, err := b.adm.ListEndOffsets(ctx, in)
	if err != nil {
		return NexmarkRun{}, err
	}
	dir := filepath.Join(b.cfg.Dir, name)
	cmd := exec.CommandContext(ctx, bin, "run", "--job", "nexmark-"+query, "--name", name,
		"--brokers", strings.Join(b.cfg.Brokers, ","), "--input", in, "--output", out,
		"--checkpoints", "file://"+filepath.Join(dir, "checkpoints"), "--state-dir", filepath.Join(dir, "state"),
		"--interval", b.cfg.Interval.String(), "--http-addr", "off", "--log-level", "warn")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return NexmarkRun{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return NexmarkRun{}, err
	}
	exited := make(chan error, 1)
	go func() {
		logTo(stderr, b.cfg.JobLog, query)
		exited <- cmd.Wait()
	}()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}()
	group := name + "-lag"
	var total int64
	ends.Each(func(e kadm.ListedOffset) { total += e.Offset })
	var (
		from    time.Time
		fromCPU time.Duration
		fromN   int64
	)
	for {
		select {
		case err := <-exited:
			exited <- err
			return NexmarkRun{}, fmt.Errorf("the worker exited before it took in every event: %v", err)
		case <-ctx.Done():
			return NexmarkRun{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		taken, err := b.taken(ctx, group, in, ends)
		if err != nil {
			return NexmarkRun{}, err
		}
		now := time.Now()
		if from.IsZero() && taken >= total/10 {
			if fromCPU, err = proc.CPU(cmd.Process.Pid); err != nil {
				return NexmarkRun{}, err
			}
			from, fromN = now, taken
		}
		if taken < total {
			continue
		}
		cpu, err := proc.CPU(cmd.Process.Pid)
		if err != nil {
			return NexmarkRun{}, err
		}
		if taken == fromN {
			return NexmarkRun{}, errors.New("the job took in every event at its first checkpoints: use more --events")
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			exited <- nil
		case <-time.After(30 * time.Second):
		}
		return NexmarkRun{Query: query, Events: taken - fromN, Elapsed: now.Sub(from), CPU: cpu - fromCPU, Total: now.Sub(start)}, nil
	}
}

// deleteTopics deletes the bench's topics (see DeleteTopics).
func (b *bench) deleteTopics(names ...string) { DeleteTopics(b.adm, b.log, names...) }

// DeleteTopics deletes the topics named, and those that start with a name
// ending in "-" (a job's internal topics), logging what fails.
func DeleteTopics(adm *kadm.Client, log *slog.Logger, names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var topics []string
	for _, n := range names {
		if !strings.HasSuffix(n, "-") {
			topics = append(topics, n)
			continue
		}
		tds, err := adm.ListTopics(ctx)
		if err != nil {
			log.Warn("list topics to delete", "err", err)
			continue
		}
		for _, t := range tds.Names() {
			if strings.HasPrefix(t, n) {
				topics = append(topics, t)
			}
		}
	}
	slices.Sort(topics)
	topics = slices.Compact(topics)
	resp, err := adm.DeleteTopics(ctx, topics...)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		log.Warn("delete topics", "topics", topics, "err", err)
	}
}

// taken is how many records of topic's partitions group's committed
// offsets are past (of those ends lists).
func (b *bench) taken(ctx context.Context, group, topic string, ends kadm.ListedOffsets) (int64, error) {
	committed, err := b.adm.FetchOffsets(ctx, group)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, nil // the group is not there yet
	}
	var n int64
	ends.Each(func(e kadm.ListedOffset) {
		if c, found := committed.Lookup(topic, e.Partition); found {
			n += min(c.At, e.Offset)
		}
	})
	return n, nil
}

// logTo passes the worker's log lines to log, at warn (the worker logs
// warnings and errors only).
func logTo(r io.Reader, log interface{ Warn(string, ...any) }, query string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		log.Warn("worker", "query", query, "line", sc.Text())
	}
}

// WriteNexmarkTable prints each query's median run (by events/s per
// core) beside its anchor, with the range of its runs.
func WriteNexmarkTable(w io.Writer, cfg Config, nc NexmarkConfig, gen Throughput, runs []NexmarkRun) {
	fmt.Fprintf(w, "Nexmark on weir: %d events (%d/s of event time) in %d partitions (= tasks); one `processor run` worker with every task;\n",
		gen.Records, nc.EventRate, cfg.Partitions)
	fmt.Fprintf(w, "exactly-once sink, Pebble state, %v checkpoints to file://; input written at %.0f events/s; median of %d runs;\n",
		cfg.Interval, gen.PerSecond(), nc.Runs)
	fmt.Fprintf(w, "steady state: from the checkpoint past a tenth of the events to the one past all (total: from the worker's start)\n")
	fmt.Fprintf(w, "%-6s %8s %9s %12s %9s %18s %16s %18s %9s\n", "query", "total s", "seconds", "events/s", "cpu s", "events/s per core", "(range)", "Flink 1.13 / core", "vs Flink")
	for _, q := range nc.Queries {
		var qs []NexmarkRun
		for _, r := range runs {
			if r.Query == q {
				qs = append(qs, r)
			}
		}
		if len(qs) == 0 {
			continue
		}
		slices.SortFunc(qs, func(a, b NexmarkRun) int { return cmp.Compare(a.PerCore(), b.PerCore()) })
		r := qs[len(qs)/2]
		anchor, ratio := "-", "-"
		if a, ok := NexmarkAnchors[q]; ok {
			anchor, ratio = fmt.Sprintf("%.0f", a), fmt.Sprintf("%.2f", r.PerCore()/a)
		}
		span := fmt.Sprintf("%.0f-%.0f", qs[0].PerCore(), qs[len(qs)-1].PerCore())
		fmt.Fprintf(w, "%-6s %8.2f %9.2f %12.0f %9.2f %18.0f %16s %18s %9s\n", q, r.Total.Seconds(), r.Elapsed.Seconds(), r.PerSecond(), r.CPU.Seconds(), r.PerCore(), span, anchor, ratio)
	}
}
