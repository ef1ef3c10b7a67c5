package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/kafkabench"
	"github.com/weirstream/weir/internal/proc"
)

// padding brings an input record to about 100 bytes: key "k<n>", value
// the record's number, this header.
var padding = []kgo.RecordHeader{{Key: "pad", Value: []byte(strings.Repeat("x", 72))}}

// run runs what c asks for. A run that fails is reported in its table
// and the others go on; run returns the failures joined, and stops at
// once when ctx ends.
func run(ctx context.Context, c config, log *slog.Logger) (report, error) {
	var rep report
	if c.interval < time.Millisecond {
		return rep, fmt.Errorf("--interval must be at least 1ms, got %v", c.interval)
	}
	if c.records < 0 || c.passthroughBytes < 0 || c.partitions <= 0 || c.keys <= 0 || c.runs <= 0 || c.latFor < 0 || c.latWarmup < 0 || (c.latFor > 0 || c.quotaBytes > 0) && c.latRate <= 0 ||
		c.restoreMB < 0 || c.restoreMB > 0 && c.restoreSession < time.Second || c.quotaBytes < 0 || c.quotaBytes > 0 && c.quotaFor <= 0 || len(c.systems) == 0 {
		return rep, fmt.Errorf("bad settings %+v", c)
	}
	// Each task (weir, Flink) has a producer of its own, so a client id:
	// the input must be over the quota in each partition.
	if perTask := int64(c.latRate) * resultBytes / int64(c.partitions); c.quotaBytes > 0 && perTask <= c.quotaBytes {
		return rep, fmt.Errorf("--latency-rate %d writes results at about %d bytes/s per partition, not above --quota-bytes %d: raise it",
			c.latRate, perTask, c.quotaBytes)
	}
	dir := c.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "weir-bench-")
		if err != nil {
			return rep, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	brokers := strings.Split(c.brokers, ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return rep, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	self, err := os.Executable() // the passthrough and weir's restore job are its children
	if err != nil {
		return rep, err
	}
	b := &bench{c: c, log: log, adm: adm, brokers: brokers, dir: dir, suffix: hex.EncodeToString(suffix[:]), self: self}

	for _, s := range c.systems {
		if err := b.prepare(ctx, s.kind); err != nil {
			return rep, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	var failed []error
	// fail notes a failed run; stop says whether to stop all of them.
	fail := func(what string, err error) (stop bool) {
		log.Error("run failed", "run", what, "err", err)
		failed = append(failed, fmt.Errorf("%s: %w", what, err))
		return ctx.Err() != nil
	}
	done := func() (report, error) { return rep, errors.Join(failed...) }

	if rep.results, err = b.throughput(ctx, fail); err != nil {
		fail("throughput", err)
		return done()
	}
	if c.latFor > 0 {
		for _, s := range latencyPlan(c.systems, c.latIntervals, c.interval) {
			l, err := b.latencyRun(ctx, s)
			if err != nil {
				l = latency{system: s, err: err}
				if fail(fmt.Sprintf("%s at %s, latency", s.kind, s.intervalText()), err) {
					return done()
				}
			} else {
				log.Info("latency", "system", s.kind, "interval", s.intervalText(), "p50", l.p50, "p99", l.p99, "samples", l.samples, "exactly_once", l.check == nil)
			}
			rep.latencies = append(rep.latencies, l)
		}
	}
	if c.quotaBytes > 0 {
		if rep.quotas, err = b.quota(ctx, fail); err != nil {
			fail("quota", err)
			return done()
		}
	}
	restored := map[string]bool{}
	for _, s := range c.systems {
		if c.restoreMB == 0 || s.kind != "weir" && s.kind != "kstreams" || restored[s.kind] { // weir-b: weir's restore is the same job
			continue
		}
		restored[s.kind] = true
		r, err := b.restoreRun(ctx, s.kind)
		if err != nil {
			fail(s.kind+", restore", err)
			return done()
		}
		log.Info("restore", "system", s.kind, "kept", r.kept, "lost", r.lost, "exactly_once", r.check == nil)
		rep.restores = append(rep.restores, r)
		if r.check != nil {
			fail(s.kind+", restore", r.check)
			return done()
		}
	}
	return done()
}

// throughput runs each system c.runs times on c.records input records
// (none if 0). A run that fails is a result with its error, noted with
// fail, unless fail says to stop.
func (b *bench) throughput(ctx context.Context, fail func(string, error) bool) ([]result, error) {
	c, log := b.c, b.log
	var res []result
	if c.records == 0 {
		return nil, nil
	}
	in := "bench-in-" + b.suffix
	if err := b.create(ctx, in); err != nil {
		return nil, err
	}
	defer b.delete(in)
	log.Info("loading input", "topic", in, "records", c.records, "partitions", c.partitions, "keys", c.keys)
	if err := b.load(ctx, in); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	for k := range c.runs {
		for _, s := range c.systems {
			r, err := b.runOnce(ctx, s, in, k)
			if err != nil {
				res = append(res, result{system: s, err: err})
				if fail(fmt.Sprintf("%s, run %d", s.name, k+1), err) {
					return res, nil
				}
				continue
			}
			attrs := []any{"system", s.name, "run", k + 1, "records_per_s", int(r.perSecond()), "cpu_s_per_million", fmt.Sprintf("%.2f", r.cpuPerMillion()),
				"harness_cpu_s_per_million", fmt.Sprintf("%.2f", perMillion(r.harnessCPU, r.records))}
			if c.brokerPID > 0 {
				attrs = append(attrs, "broker_cpu_s_per_million", fmt.Sprintf("%.2f", perMillion(r.brokerCPU, r.records)))
			}
			log.Info("run", append(attrs, "peak_rss_mb", r.rss>>20, "exactly_once", r.check == nil)...)
			res = append(res, r)
		}
	}
	return res, nil
}

type bench struct {
	c       config
	log     *slog.Logger
	adm     *kadm.Client
	brokers []string
	dir     string
	suffix  string
	self    string // this binary, for the passthrough
}

func (b *bench) create(ctx context.Context, topic string) error {
	resp, err := b.adm.CreateTopics(ctx, int32(b.c.partitions), -1, nil, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// delete deletes topics, and those with the prefixes ending in "-".
func (b *bench) delete(names ...string) { kafkabench.DeleteTopics(b.adm, b.log, names...) }

// load writes the input: record i has key k<i%keys> and value i.
func (b *bench) load(ctx context.Context, topic string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		return err
	}
	defer cl.Close()
	errc := make(chan error, 1)
	for i := range b.c.records {
		r := &kgo.Record{Topic: topic, Key: []byte("k" + strconv.FormatInt(i%int64(b.c.keys), 10)),
			Value: strconv.AppendInt(nil, i, 10), Headers: padding}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// prepare builds what a system of kind s runs.
func (b *bench) prepare(ctx context.Context, s string) error {
	switch s {
	case "passthrough":
		return nil
	case "weir", "weir-b":
		if b.c.processor != "" || s == "weir-b" && b.c.processorB != "" {
			return nil
		}
		b.c.processor = filepath.Join(b.dir, "processor")
		b.log.Info("building the processor")
		return command(ctx, ".", "go", "build", "-o", b.c.processor, "./cmd/processor")
	case "flink", "flink-heap", "kstreams":
		peer := peerOf(s)
		pom := filepath.Join("bench", "peers", peer, "pom.xml")
		if _, err := os.Stat(pom); err != nil {
			return fmt.Errorf("run bench from the repository's root: %w", err)
		}
		if peerBuilt(peer) {
			return nil
		}
		b.log.Info("building the peer with Maven (first use downloads its dependencies)", "peer", peer)
		return command(ctx, ".", "mvn", "-q", "-B", "-f", pom, "package", "-DskipTests")
	}
	return fmt.Errorf("unknown system %q (want one of %s)", s, strings.Join(kinds, ", "))
}

// peerOf is the peer (bench/peers/...) that runs kind.
func peerOf(kind string) string {
	if kind == "flink-heap" {
		return "flink"
	}
	return kind
}

// peerBuilt says whether peer s's target has its libraries and a class
// for each of its sources.
func peerBuilt(s string) bool {
	peer := filepath.Join("bench", "peers", s)
	srcs, _ := filepath.Glob(filepath.Join(peer, "src", "main", "java", "weir", "bench", "*.java"))
	if _, err := os.Stat(filepath.Join(peer, "target", "lib")); err != nil || len(srcs) == 0 {
		return false
	}
	for _, src := range srcs {
		class := strings.TrimSuffix(filepath.Base(src), ".java") + ".class"
		if _, err := os.Stat(filepath.Join(peer, "target", "classes", "weir", "bench", class)); err != nil {
			return false
		}
	}
	return true
}

func command(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// start starts system s reading in and writing out; name is unique to the
// run, dir its own directory. A probe asks it to show its checkpoints or
// commits (see quota.go); nil for none.
func (b *bench) start(s system, in, out, name, dir string, p *probe) (*exec.Cmd, error) {
	brokers := strings.Join(b.brokers, ",")
	var cmd *exec.Cmd
	switch s.kind {
	case "passthrough":
		cmd = exec.Command(b.self, "passthrough", brokers, in, out, strconv.Itoa(b.c.passthroughBytes))
	case "weir", "weir-b":
		bin, args := b.weirCommand(s, in, out, name, dir, p != nil)
		cmd = exec.Command(bin, args...)
	case "flink", "flink-heap", "kstreams":
		last := strconv.Itoa(b.c.partitions) // Flink: parallelism
		if s.kind == "kstreams" {
			last = "2" // stream threads: one per core of the machine
		}
		var props []string
		if s.kind == "flink-heap" {
			props = append(props, "-Dweir.bench.state=hashmap")
		}
		if p != nil && p.restPort > 0 {
			props = append(props, "-Dweir.bench.rest.port="+strconv.Itoa(p.restPort))
		}
		args := append(props, "-cp", b.peerClasspath(peerOf(s.kind)), "weir.bench.Count", brokers, in, out, name, dir, last,
			strconv.FormatInt(s.interval.Milliseconds(), 10))
		cmd = exec.Command("java", args...)
	default:
		return nil, fmt.Errorf("unknown system %q", s.kind)
	}
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if s.kind != "passthrough" && (!isWeir(s.kind) || p != nil) {
		// The peers' INFO logs, and weir's when a probe reads them.
		cmd.Stdout, cmd.Stderr = nil, nil
		f, err := os.Create(filepath.Join(dir, "log"))
		if err != nil {
			return nil, err
		}
		defer f.Close() // the child has its own descriptor
		cmd.Stdout, cmd.Stderr = f, f
	}
	return cmd, cmd.Start()
}

// weirCommand is the binary and arguments of a run of weir or weir-b (see
// start); probed: a probe reads its log and status page.
func (b *bench) weirCommand(s system, in, out, name, dir string, probed bool) (string, []string) {
	args := []string{"run", "--job", "count", "--name", name, "--brokers", strings.Join(b.brokers, ","),
		"--input", in, "--output", out, "--checkpoints", "file://" + filepath.Join(dir, "checkpoints"),
		"--state-dir", filepath.Join(dir, "state"), "--interval", s.interval.String(), "--http-addr", "off", "--log-level", "warn"}
	bin, flags := b.c.processor, b.c.weirFlags
	if s.kind == "weir-b" {
		flags = b.c.weirBFlags
		if b.c.processorB != "" {
			bin = b.c.processorB
		}
	}
	args = append(args, flags...)
	if probed { // after the flags: the probe needs these
		args = append(args, "--http-addr", "127.0.0.1:0", "--log-level", "info")
	}
	return bin, args
}

// peerClasspath is the Java class path of peer s, built by prepare.
func (b *bench) peerClasspath(s string) string {
	peer := filepath.Join("bench", "peers", s, "target")
	return filepath.Join(peer, "classes") + string(os.PathListSeparator) + filepath.Join(peer, "lib", "*")
}

func (b *bench) runOnce(ctx context.Context, s system, in string, k int) (result, error) {
	name := fmt.Sprintf("bench-%s-%d-%s", s.slug(), k, b.suffix)
	out := name + "-out"
	dir := filepath.Join(b.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return result{}, err
	}
	if err := b.create(ctx, out); err != nil {
		return result{}, err
	}
	defer b.delete(out, name+"-")
	// Counted, not checked, while the run is timed, for every system
	// alike: the harness shares the cores with the system it measures,
	// and checking each of weir's results as it came (the passthrough's
	// were only counted) cost weir's ratio 0.06 on average in runs
	// alternated with this harness (docs/benchmarks.md, ninth pass). The
	// check reads the output again after the timing.
	chk := newChecker(b.c.keys)
	chk.raw = true
	reader := make(chan error, 1)
	rctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	go func() { reader <- b.read(rctx, out, chk) }()

	cmd, err := b.start(s, in, out, name, dir, nil)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	exited, stop := watch(cmd)
	defer stop()

	var (
		from    time.Time
		fromCPU time.Duration
		fromN   int64
		rss     int64
		// The harness's and the broker's CPU time at from.
		fromHarness, fromBroker time.Duration
	)
	// others samples the CPU time of the harness and of the broker (zero
	// if its pid is unknown): the machine's other work in the run.
	others := func() (harness, broker time.Duration, err error) {
		if harness, err = proc.CPU(os.Getpid()); err == nil && b.c.brokerPID > 0 {
			broker, err = proc.CPU(b.c.brokerPID)
		}
		return harness, broker, err
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Minute)
	for {
		select {
		case err := <-exited:
			exited <- err
			return result{}, fmt.Errorf("the process exited with %d of %d records out: %v (log in %s)", chk.seen(), b.c.records, err, dir)
		case err := <-reader:
			return result{}, fmt.Errorf("reading the output: %v", err)
		case <-ctx.Done():
			return result{}, ctx.Err()
		case <-deadline:
			return result{}, fmt.Errorf("%d of %d records out after 10 minutes (log in %s)", chk.seen(), b.c.records, dir)
		case <-tick.C:
		}
		n := chk.seen()
		rss = max(rss, proc.PeakRSS(cmd.Process.Pid))
		if from.IsZero() && n > 0 {
			if fromCPU, err = proc.CPU(cmd.Process.Pid); err != nil {
				return result{}, err
			}
			if fromHarness, fromBroker, err = others(); err != nil {
				return result{}, err
			}
			from, fromN = time.Now(), n
		}
		if n < b.c.records {
			continue
		}
		now := time.Now()
		cpu, err := proc.CPU(cmd.Process.Pid)
		if err != nil {
			return result{}, err
		}
		harness, broker, err := others()
		if err != nil {
			return result{}, err
		}
		// A quiet second for duplicates after the last record.
		time.Sleep(time.Second)
		stopReading()
		<-reader
		check, err := b.recheck(ctx, out, chk.seen(), s.kind == "passthrough")
		if err != nil {
			return result{}, err
		}
		return result{system: s, records: n - fromN, elapsed: now.Sub(from), cpu: cpu - fromCPU, rss: rss,
			total: now.Sub(start), check: check, harnessCPU: harness - fromHarness, brokerCPU: broker - fromBroker}, nil
	}
}

// watch waits for cmd in the background: exited yields its end; stop
// ends it with SIGTERM, or SIGKILL after 30 s, and waits for it (once:
// later calls return at once).
func watch(cmd *exec.Cmd) (exited chan error, stop func()) {
	exited = make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	return exited, func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		})
	}
}
