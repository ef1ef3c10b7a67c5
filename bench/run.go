package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

func run(ctx context.Context, c config, log *slog.Logger) ([]result, []latency, []restore, error) {
	if c.interval < time.Millisecond {
		return nil, nil, nil, fmt.Errorf("--interval must be at least 1ms, got %v", c.interval)
	}
	if c.records < 0 || c.partitions <= 0 || c.keys <= 0 || c.runs <= 0 || c.latFor < 0 || c.latFor > 0 && c.latRate <= 0 ||
		c.restoreMB < 0 || c.restoreMB > 0 && c.restoreSession < time.Second {
		return nil, nil, nil, fmt.Errorf("bad settings %+v", c)
	}
	dir := c.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "weir-bench-")
		if err != nil {
			return nil, nil, nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	brokers := strings.Split(c.brokers, ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, nil, nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	self, err := os.Executable() // the passthrough and weir's restore job are its children
	if err != nil {
		return nil, nil, nil, err
	}
	b := &bench{c: c, log: log, adm: adm, brokers: brokers, dir: dir, suffix: hex.EncodeToString(suffix[:]), self: self}

	for _, s := range c.systems {
		if err := b.prepare(ctx, s); err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", s, err)
		}
	}
	res, err := b.throughput(ctx)
	if err != nil {
		return res, nil, nil, err
	}
	var lats []latency
	for _, s := range c.systems {
		if c.latFor == 0 {
			break
		}
		l, err := b.latencyRun(ctx, s)
		if err != nil {
			return res, lats, nil, fmt.Errorf("%s, latency: %w", s, err)
		}
		log.Info("latency", "system", s, "p50", l.p50, "p99", l.p99, "samples", l.samples, "exactly_once", l.check == nil)
		lats = append(lats, l)
	}
	var rests []restore
	for _, s := range c.systems {
		if c.restoreMB == 0 || s != "weir" && s != "kstreams" {
			continue
		}
		r, err := b.restoreRun(ctx, s)
		if err != nil {
			return res, lats, rests, fmt.Errorf("%s, restore: %w", s, err)
		}
		log.Info("restore", "system", s, "kept", r.kept, "lost", r.lost, "exactly_once", r.check == nil)
		rests = append(rests, r)
		if r.check != nil {
			return res, lats, rests, fmt.Errorf("%s, restore: %w", s, r.check)
		}
	}
	return res, lats, rests, nil
}

// throughput runs each system c.runs times on c.records input records
// (none if 0).
func (b *bench) throughput(ctx context.Context) ([]result, error) {
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
				return res, fmt.Errorf("%s, run %d: %w", s, k+1, err)
			}
			log.Info("run", "system", s, "run", k+1, "records_per_s", int(r.perSecond()), "cpu_s_per_million", fmt.Sprintf("%.2f", r.cpuPerMillion()),
				"peak_rss_mb", r.rss>>20, "exactly_once", r.check == nil)
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

// prepare builds what system s runs.
func (b *bench) prepare(ctx context.Context, s string) error {
	switch s {
	case "passthrough":
		return nil
	case "weir":
		if b.c.processor != "" {
			return nil
		}
		b.c.processor = filepath.Join(b.dir, "processor")
		b.log.Info("building the processor")
		return command(ctx, ".", "go", "build", "-o", b.c.processor, "./cmd/processor")
	case "flink", "kstreams":
		pom := filepath.Join("bench", "peers", s, "pom.xml")
		if _, err := os.Stat(pom); err != nil {
			return fmt.Errorf("run bench from the repository's root: %w", err)
		}
		if peerBuilt(s) {
			return nil
		}
		b.log.Info("building the peer with Maven (first use downloads its dependencies)", "peer", s)
		return command(ctx, ".", "mvn", "-q", "-B", "-f", pom, "package", "-DskipTests")
	}
	return fmt.Errorf("unknown system %q (want passthrough, weir, flink or kstreams)", s)
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
// run, dir its own directory.
func (b *bench) start(s, in, out, name, dir string) (*exec.Cmd, error) {
	brokers := strings.Join(b.brokers, ",")
	var cmd *exec.Cmd
	switch s {
	case "passthrough":
		cmd = exec.Command(b.self, "passthrough", brokers, in, out)
	case "weir":
		args := []string{"run", "--job", "count", "--name", name, "--brokers", brokers,
			"--input", in, "--output", out, "--checkpoints", "file://" + filepath.Join(dir, "checkpoints"),
			"--state-dir", filepath.Join(dir, "state"), "--interval", b.c.interval.String(), "--http-addr", "off", "--log-level", "warn"}
		cmd = exec.Command(b.c.processor, append(args, b.c.weirFlags...)...)
	case "flink", "kstreams":
		last := strconv.Itoa(b.c.partitions) // Flink: parallelism
		if s == "kstreams" {
			last = "2" // stream threads: one per core of the machine
		}
		cmd = exec.Command("java", "-cp", b.peerClasspath(s), "weir.bench.Count", brokers, in, out, name, dir, last,
			strconv.FormatInt(b.c.interval.Milliseconds(), 10))
	}
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if s == "flink" || s == "kstreams" {
		cmd.Stdout, cmd.Stderr = nil, nil // their INFO logs; failures show as a run that never completes
		if f, err := os.Create(filepath.Join(dir, "log")); err == nil {
			cmd.Stdout, cmd.Stderr = f, f
		}
	}
	return cmd, cmd.Start()
}

// peerClasspath is the Java class path of peer s, built by prepare.
func (b *bench) peerClasspath(s string) string {
	peer := filepath.Join("bench", "peers", s, "target")
	return filepath.Join(peer, "classes") + string(os.PathListSeparator) + filepath.Join(peer, "lib", "*")
}

func (b *bench) runOnce(ctx context.Context, s, in string, k int) (result, error) {
	name := fmt.Sprintf("bench-%s-%d-%s", s, k, b.suffix)
	out := name + "-out"
	dir := filepath.Join(b.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return result{}, err
	}
	if err := b.create(ctx, out); err != nil {
		return result{}, err
	}
	defer b.delete(out, name+"-")
	chk := newChecker(b.c.keys)
	chk.raw = s == "passthrough"
	reader := make(chan error, 1)
	rctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	go func() { reader <- b.read(rctx, out, chk) }()

	cmd, err := b.start(s, in, out, name, dir)
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
	)
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
		// A quiet second for duplicates after the last record.
		time.Sleep(time.Second)
		stopReading()
		<-reader
		return result{system: s, records: n - fromN, elapsed: now.Sub(from), cpu: cpu - fromCPU, rss: rss,
			total: now.Sub(start), check: chk.verify(b.c.records)}, nil
	}
}

// watch waits for cmd in the background: exited yields its end; stop
// ends it with SIGTERM, or SIGKILL after 30 s, and waits for it.
func watch(cmd *exec.Cmd) (exited chan error, stop func()) {
	exited = make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return exited, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
}
