package kafkabench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/count"
)

// Config says what to measure. Zero fields take the defaults in brackets.
type Config struct {
	Brokers    []string
	Records    int64         // input records for the throughput runs [1,000,000]
	Partitions int32         // partitions of every topic, = tasks [4]
	Keys       int           // distinct keys [10,000]
	Interval   time.Duration // weir's checkpoint interval [1s]
	// LatencyRate records per second for LatencyDuration [20,000 for 20s].
	LatencyRate     int
	LatencyDuration time.Duration
	// Dir holds weir's checkpoints and state [a temporary directory].
	Dir string
	// Log hears progress, JobLog the weir jobs' own logs [both discarded].
	Log, JobLog *slog.Logger
}

func (c *Config) defaults() error {
	if len(c.Brokers) == 0 {
		return errors.New("kafkabench: no brokers")
	}
	set := func(p *int64, v int64) {
		if *p == 0 {
			*p = v
		}
	}
	set(&c.Records, 1_000_000)
	if c.Partitions == 0 {
		c.Partitions = 4
	}
	if c.Keys == 0 {
		c.Keys = 10_000
	}
	if c.Interval == 0 {
		c.Interval = time.Second
	}
	if c.LatencyRate == 0 {
		c.LatencyRate = 20_000
	}
	if c.LatencyDuration == 0 {
		c.LatencyDuration = 20 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.JobLog == nil {
		c.JobLog = slog.New(slog.DiscardHandler)
	}
	if c.Records <= 0 || c.Partitions <= 0 || c.Keys <= 0 || c.Interval < 0 || c.LatencyRate <= 0 || c.LatencyDuration <= 0 {
		return fmt.Errorf("kafkabench: bad settings %+v", *c)
	}
	return nil
}

// Throughput is one measured pipeline run over the whole input.
type Throughput struct {
	Name    string
	Records int64
	Elapsed time.Duration
}

// PerSecond is the records per second of the run.
func (t Throughput) PerSecond() float64 { return float64(t.Records) / t.Elapsed.Seconds() }

// Latency is the produce-to-visible latency of one pipeline at a fixed rate.
type Latency struct {
	Name          string
	Records       int64
	P50, P99, Max time.Duration
}

// Result is everything Run measured.
type Result struct {
	Config   Config
	Generate Throughput // writing the input with a plain producer
	Pass     Throughput // (a)
	Weir     Throughput // (b)
	Latency  []Latency  // (c)
}

// Run measures as the package doc says. Progress goes to cfg.Log.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	b, done, err := newBench(cfg)
	if err != nil {
		return nil, err
	}
	defer done()
	cfg = b.cfg
	res := &Result{Config: cfg}

	in, passOut, weirOut := b.topic("in"), b.topic("pass-out"), b.topic("weir-out")
	if err := b.create(ctx, in, passOut, weirOut); err != nil {
		return nil, err
	}
	b.log.Info("generating input", "topic", in, "records", cfg.Records, "partitions", cfg.Partitions, "keys", cfg.Keys)
	if res.Generate, err = b.generate(ctx, in); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	b.log.Info("(a) passthrough", "from", in, "to", passOut)
	if res.Pass, err = b.passthrough(ctx, in, passOut); err != nil {
		return nil, fmt.Errorf("passthrough: %w", err)
	}
	b.log.Info("(b) weir count job, exactly-once", "from", in, "to", weirOut, "interval", cfg.Interval)
	if res.Weir, err = b.weirThroughput(ctx, in, weirOut); err != nil {
		return nil, fmt.Errorf("weir: %w", err)
	}
	for _, weir := range []bool{false, true} {
		l, err := b.latency(ctx, weir)
		if err != nil {
			return nil, fmt.Errorf("latency: %w", err)
		}
		res.Latency = append(res.Latency, l)
	}
	return res, nil
}

// newBench checks cfg, fills in its defaults (a temporary Dir, removed by
// done) and connects an admin client (closed by done).
func newBench(cfg Config) (b *bench, done func(), err error) {
	if err := cfg.defaults(); err != nil {
		return nil, nil, err
	}
	var dir string
	if cfg.Dir == "" {
		if dir, err = os.MkdirTemp("", "kafkabench-"); err != nil {
			return nil, nil, err
		}
		cfg.Dir = dir
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	b = &bench{cfg: cfg, log: cfg.Log, suffix: randomSuffix(), adm: kadm.NewClient(cl)}
	return b, func() {
		cl.Close()
		if dir != "" {
			os.RemoveAll(dir)
		}
	}, nil
}

type bench struct {
	cfg    Config
	log    *slog.Logger
	adm    *kadm.Client
	suffix string
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (b *bench) topic(role string) string { return "kafkabench-" + role + "-" + b.suffix }

func (b *bench) create(ctx context.Context, topics ...string) error {
	resp, err := b.adm.CreateTopics(ctx, b.cfg.Partitions, -1, nil, topics...)
	if err != nil {
		return err
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil {
			return fmt.Errorf("create topic %s: %w", r.Topic, r.Err)
		}
	}
	return nil
}

// record is input record i: key "k<i%keys>", value "<i>".
func (b *bench) record(topic string, i int64) *kgo.Record {
	return &kgo.Record{
		Topic: topic,
		Key:   []byte("k" + strconv.FormatInt(i%int64(b.cfg.Keys), 10)),
		Value: []byte(strconv.FormatInt(i, 10)),
	}
}

// promises counts acknowledged records and keeps the first error.
type promises struct {
	acked atomic.Int64
	err   atomic.Pointer[error]
}

func (p *promises) promise(_ *kgo.Record, err error) {
	if err != nil {
		p.err.CompareAndSwap(nil, &err)
		return
	}
	p.acked.Add(1)
}

func (p *promises) failed() error {
	if e := p.err.Load(); e != nil {
		return *e
	}
	return nil
}

func (b *bench) generate(ctx context.Context, topic string) (Throughput, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.cfg.Brokers...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return Throughput{}, err
	}
	defer cl.Close()
	var p promises
	start := time.Now()
	for i := range b.cfg.Records {
		cl.Produce(ctx, b.record(topic, i), p.promise)
	}
	if err := cl.Flush(ctx); err != nil {
		return Throughput{}, err
	}
	t := Throughput{Name: "generate input (plain producer)", Records: b.cfg.Records, Elapsed: time.Since(start)}
	if err := p.failed(); err != nil {
		return t, err
	}
	return t, nil
}

// passthrough copies in to out with a read_committed consumer and a plain
// producer, until every record is acknowledged.
func (b *bench) passthrough(ctx context.Context, in, out string) (Throughput, error) {
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.cfg.Brokers...),
		kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return Throughput{}, err
	}
	defer cons.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.cfg.Brokers...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return Throughput{}, err
	}
	defer prod.Close()
	var p promises
	var n int64
	start := time.Now()
	for n < b.cfg.Records {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return Throughput{}, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			prod.Produce(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: r.Value}, p.promise)
			n++
		})
		if err := p.failed(); err != nil {
			return Throughput{}, err
		}
	}
	if err := prod.Flush(ctx); err != nil {
		return Throughput{}, err
	}
	return Throughput{Name: "(a) passthrough consume -> produce", Records: n, Elapsed: time.Since(start)}, p.failed()
}

// weirThroughput runs the count job over in until out holds one visible
// record per input record.
func (b *bench) weirThroughput(ctx context.Context, in, out string) (Throughput, error) {
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	start := time.Now()
	job := countJob{
		Brokers: b.cfg.Brokers, Name: "kafkabench-" + b.suffix, Input: in, Output: out,
		Partitions: b.cfg.Partitions, Interval: b.cfg.Interval, Dir: b.cfg.Dir + "/throughput",
		Log: b.cfg.JobLog,
	}
	_, done, err := job.start(rctx)
	if err != nil {
		return Throughput{}, err
	}
	visible := make(chan error, 1)
	go func() {
		visible <- b.readVisible(rctx, out, b.cfg.Records, func(*kgo.Record, time.Time) {})
	}()
	select {
	case err := <-visible:
		elapsed := time.Since(start)
		stop()
		if rerr := <-done; rerr != nil && err == nil {
			err = rerr
		}
		return Throughput{Name: fmt.Sprintf("(b) weir count, exactly-once, %v checkpoints", b.cfg.Interval), Records: b.cfg.Records, Elapsed: elapsed}, err
	case err := <-done:
		return Throughput{}, fmt.Errorf("the job ended before its output was complete: %v", err)
	}
}

// readVisible reads topic read_committed from the start until it has seen n
// records, calling each for every record with the time it was read.
func (b *bench) readVisible(ctx context.Context, topic string, n int64, each func(*kgo.Record, time.Time)) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.cfg.Brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	var seen int64
	for seen < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := fs.Err0(); err != nil {
			return err
		}
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			each(r, now)
			seen++
		})
	}
	return nil
}

// latency writes records at the configured rate into a fresh topic, with a
// pipeline (the passthrough, or the count job) already running, and measures
// the time from handing each record to the producer until its output is
// visible read_committed.
func (b *bench) latency(ctx context.Context, weir bool) (Latency, error) {
	name := "passthrough (plain producer)"
	role := "lat-pass"
	if weir {
		name = fmt.Sprintf("weir count, exactly-once, %v checkpoints", b.cfg.Interval)
		role = "lat-weir"
	}
	in, out := b.topic(role+"-in"), b.topic(role+"-out")
	if err := b.create(ctx, in, out); err != nil {
		return Latency{}, err
	}
	// The first records, written during warmUp, are not measured: they
	// would measure the clients' metadata discovery and connection set-up
	// on the fresh topics, not the pipeline.
	const warmUp = 3 * time.Second
	warm := int64(b.cfg.LatencyRate) * int64(warmUp/time.Millisecond) / 1000
	total := warm + int64(b.cfg.LatencyRate)*int64(b.cfg.LatencyDuration/time.Millisecond)/1000
	sent := make([]atomic.Int64, total) // UnixNano at Produce, per input record
	keys := int64(b.cfg.Keys)

	rctx, stop := context.WithCancel(ctx)
	defer stop()
	pipeDone := make(chan error, 1)
	if weir {
		job := countJob{
			Brokers: b.cfg.Brokers, Name: "kafkabench-lat-" + b.suffix, Input: in, Output: out,
			Partitions: b.cfg.Partitions, Interval: b.cfg.Interval, Dir: b.cfg.Dir + "/latency",
			Log: b.cfg.JobLog,
		}
		ready, done, err := job.start(rctx)
		if err != nil {
			return Latency{}, err
		}
		select {
		case <-ready:
		case err := <-done:
			return Latency{}, fmt.Errorf("the job ended before it was ready: %v", err)
		}
		go func() { pipeDone <- <-done }()
	} else {
		go func() { pipeDone <- b.passthroughForever(rctx, in, out) }()
	}

	// inputOf maps an output record back to the input record it reflects.
	inputOf := func(r *kgo.Record) (int64, error) { return strconv.ParseInt(string(r.Value), 10, 64) }
	if weir {
		// The c-th record of key k<j> is input (c-1)*keys + j: a key's
		// records are in one partition, in the order they were produced.
		inputOf = func(r *kgo.Record) (int64, error) {
			var o count.Out
			if err := json.Unmarshal(r.Value, &o); err != nil {
				return 0, err
			}
			j, err := strconv.ParseInt(strings.TrimPrefix(o.Key, "k"), 10, 64)
			if err != nil {
				return 0, err
			}
			return (o.Count-1)*keys + j, nil
		}
	}
	lat := make([]time.Duration, 0, total)
	var bad error
	readDone := make(chan error, 1)
	go func() {
		readDone <- b.readVisible(rctx, out, total, func(r *kgo.Record, now time.Time) {
			i, err := inputOf(r)
			if err != nil || i < 0 || i >= total || sent[i].Load() == 0 {
				if bad == nil {
					bad = fmt.Errorf("output record %q (%v) maps to no sent input record", r.Value, err)
				}
				return
			}
			if i >= warm {
				lat = append(lat, now.Sub(time.Unix(0, sent[i].Load())))
			}
		})
	}()

	prod, err := kgo.NewClient(kgo.SeedBrokers(b.cfg.Brokers...), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		return Latency{}, err
	}
	defer prod.Close()
	var p promises
	const tick = 5 * time.Millisecond
	perTick := max(1, int64(b.cfg.LatencyRate)*int64(tick)/int64(time.Second))
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	b.log.Info("latency run", "pipeline", name, "rate", b.cfg.LatencyRate, "warm_up", warmUp, "duration", b.cfg.LatencyDuration, "records", total)
	for i := int64(0); i < total; {
		for range min(perTick, total-i) {
			r := b.record(in, i)
			sent[i].Store(time.Now().UnixNano())
			prod.Produce(ctx, r, p.promise)
			i++
		}
		select {
		case <-ticker.C:
		case <-ctx.Done():
			return Latency{}, ctx.Err()
		case err := <-pipeDone:
			return Latency{}, fmt.Errorf("%s ended while producing: %v", name, err)
		}
	}
	if err := prod.Flush(ctx); err != nil {
		return Latency{}, err
	}
	if err := p.failed(); err != nil {
		return Latency{}, err
	}
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	select {
	case err := <-readDone:
		if err != nil {
			return Latency{}, err
		}
	case err := <-pipeDone:
		return Latency{}, fmt.Errorf("%s ended before its output was complete: %v", name, err)
	case <-deadline.C:
		return Latency{}, fmt.Errorf("%s: output incomplete 2 minutes after the last input", name)
	}
	if bad != nil {
		return Latency{}, bad
	}
	stop()
	<-pipeDone
	slices.Sort(lat)
	pct := func(q int) time.Duration { return lat[min(len(lat)-1, len(lat)*q/100)] }
	return Latency{Name: name, Records: int64(len(lat)), P50: pct(50), P99: pct(99), Max: lat[len(lat)-1]}, nil
}

// passthroughForever copies in to out until ctx ends.
func (b *bench) passthroughForever(ctx context.Context, in, out string) error {
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.cfg.Brokers...),
		kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer cons.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.cfg.Brokers...), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		return err
	}
	defer prod.Close()
	var p promises
	for {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err := fs.Err0(); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			prod.Produce(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: r.Value}, p.promise)
		})
		if err := p.failed(); err != nil {
			return err
		}
	}
}

// WriteTable prints the result as a table.
func (r *Result) WriteTable(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "kafkabench: %d records, %d partitions (= tasks), %d keys, brokers %s\n\n",
		c.Records, c.Partitions, c.Keys, strings.Join(c.Brokers, ","))
	fmt.Fprintf(w, "%-52s %10s %9s %12s\n", "throughput", "records", "seconds", "records/s")
	for _, t := range []Throughput{r.Generate, r.Pass, r.Weir} {
		fmt.Fprintf(w, "%-52s %10d %9.2f %12.0f\n", t.Name, t.Records, t.Elapsed.Seconds(), t.PerSecond())
	}
	fmt.Fprintf(w, "%-52s %10s %9s %12.2f\n\n", "ratio (b)/(a)", "", "", r.Weir.PerSecond()/r.Pass.PerSecond())
	fmt.Fprintf(w, "latency, produce -> visible read_committed, at %d records/s for %v (after 3s not measured)\n", c.LatencyRate, c.LatencyDuration)
	fmt.Fprintf(w, "%-52s %10s %9s %9s %9s\n", "pipeline", "records", "p50", "p99", "max")
	for _, l := range r.Latency {
		fmt.Fprintf(w, "%-52s %10d %9s %9s %9s\n", l.Name, l.Records, ms(l.P50), ms(l.P99), ms(l.Max))
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
