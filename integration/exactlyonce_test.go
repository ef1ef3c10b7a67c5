package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/testcluster"
)

// This file holds the exactly-once check of DESIGN.md ("Testing"): a
// generator writes numbered records, and a read_committed reader checks that
// the count job's output reflects every input record exactly once.
//
// The count job (cmd/processor run --job count) reads records with key
// "k<i%K>" and value "<i>" and writes, for each, one record with the same
// key and the value {"key":..,"count":c,"sum":s}: the number and the sum of
// the key's records so far. Since a key's records are in one partition, in
// order, the record with count c must carry the sum of the key's first c
// values, and counts 1..n must each appear exactly once.

// numberedRecord is input record i of a generator with keys keys.
func numberedRecord(topic string, i int64, keys int) *kgo.Record {
	return &kgo.Record{
		Topic: topic,
		Key:   []byte("k" + strconv.FormatInt(i%int64(keys), 10)),
		Value: []byte(strconv.FormatInt(i, 10)),
	}
}

// generator produces numbered records 0, 1, ... at a steady rate until it
// reached its limit or is stopped.
type generator struct {
	t        *testing.T
	produced atomic.Int64 // acknowledged records
	failed   atomic.Pointer[error]
	stop     context.CancelFunc
	done     chan struct{}
	from     int64 // the first record's number
	total    int64 // one past the last record's number
}

// startGenerator writes records 0..limit-1 (limit < 0: until Stop) to topic
// at about rate records per second (0: as fast as the client goes).
func startGenerator(t *testing.T, c *testcluster.Cluster, topic string, keys int, limit int64, rate int) *generator {
	t.Helper()
	return startGeneratorAt(t, c, topic, keys, 0, limit, rate)
}

// startGeneratorFrom writes records from..from+n-1 as fast as it can; Wait
// returns from+n.
func startGeneratorFrom(t *testing.T, c *testcluster.Cluster, topic string, keys int, from, n int64) *generator {
	t.Helper()
	return startGeneratorAt(t, c, topic, keys, from, from+n, 0)
}

// startGeneratorAt writes records from..limit-1 (limit < 0: until Stop).
func startGeneratorAt(t *testing.T, c *testcluster.Cluster, topic string, keys int, from, limit int64, rate int) *generator {
	t.Helper()
	cl := c.Client(t, kgo.ProducerLinger(5*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	g := &generator{t: t, stop: cancel, done: make(chan struct{}), from: from}
	t.Cleanup(func() { g.Stop() })
	go func() {
		defer close(g.done)
		i := from
		promise := func(_ *kgo.Record, err error) {
			if err != nil {
				g.failed.CompareAndSwap(nil, &err)
				return
			}
			g.produced.Add(1)
		}
		const tick = 10 * time.Millisecond
		var ticker *time.Ticker
		perTick := int64(1000)
		if rate > 0 {
			ticker = time.NewTicker(tick)
			defer ticker.Stop()
			perTick = max(1, int64(rate)*int64(tick)/int64(time.Second))
		}
		for limit < 0 || i < limit {
			n := perTick
			if limit >= 0 {
				n = min(n, limit-i)
			}
			for range n {
				cl.Produce(context.Background(), numberedRecord(topic, i, keys), promise)
				i++
			}
			if ticker != nil {
				select {
				case <-ticker.C:
				case <-ctx.Done():
				}
			}
			if ctx.Err() != nil {
				break
			}
		}
		// Records handed to the client are written even when stopped:
		// the flush uses a fresh context.
		fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer fcancel()
		if err := cl.Flush(fctx); err != nil {
			g.failed.CompareAndSwap(nil, &err)
		}
		g.total = i
	}()
	return g
}

// Stop ends the generator and returns how many records it wrote, failing
// the test if any was not written.
func (g *generator) Stop() int64 {
	g.t.Helper()
	g.stop()
	<-g.done
	if err := g.failed.Load(); err != nil {
		g.t.Fatalf("generator: %v", *err)
	}
	if got := g.produced.Load(); got != g.total-g.from {
		g.t.Fatalf("generator handed %d records to the client, %d were acknowledged", g.total-g.from, got)
	}
	return g.total
}

// Wait waits for the generator to reach its limit and returns Stop's result.
func (g *generator) Wait(ctx context.Context) int64 {
	g.t.Helper()
	select {
	case <-g.done:
	case <-ctx.Done():
		g.t.Fatalf("generator: not done: %v", context.Cause(ctx))
	}
	return g.Stop()
}

// --- the output reader --------------------------------------------------------

// endKey marks the end record the test writes into every output partition
// once the workers stopped: read_committed delivers it only after every
// transaction before it is resolved, so seeing it on every partition means
// the reader has all the output there will be.
const endKey = "__weir_test_end__"

type outRec struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
	Sum   int64  `json:"sum"`

	partition int32
	offset    int64
	producer  int64 // the transactional producer that wrote it, and its epoch
	epoch     int16
}

func (o outRec) where() string {
	return fmt.Sprintf("%d@%d (producer %d, epoch %d)", o.partition, o.offset, o.producer, o.epoch)
}

// outputReader reads a count job's output read_committed from the start,
// from a goroutine, for as long as the test runs.
type outputReader struct {
	t          *testing.T
	topic      string
	partitions int32

	mu       sync.Mutex
	recs     []outRec
	distinct map[string]map[int64]bool
	ndist    int
	ends     map[int32]bool
	bad      []string // records that do not parse
	err      error
	changed  chan struct{}
	stop     context.CancelFunc
	done     chan struct{}
}

func startOutputReader(t *testing.T, c *testcluster.Cluster, topic string, partitions int32) *outputReader {
	t.Helper()
	cl := c.Client(t,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	ctx, cancel := context.WithCancel(context.Background())
	r := &outputReader{
		t: t, topic: topic, partitions: partitions,
		distinct: map[string]map[int64]bool{},
		ends:     map[int32]bool{},
		changed:  make(chan struct{}),
		stop:     cancel,
		done:     make(chan struct{}),
	}
	t.Cleanup(func() { r.Stop() })
	go func() {
		defer close(r.done)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			var errs []string
			fs.EachError(func(topic string, p int32, err error) {
				errs = append(errs, fmt.Sprintf("%s/%d: %v", topic, p, err))
			})
			r.mu.Lock()
			if len(errs) > 0 && r.err == nil {
				r.err = fmt.Errorf("read %s: %s", topic, strings.Join(errs, "; "))
			}
			fs.EachRecord(func(rec *kgo.Record) {
				if string(rec.Key) == endKey {
					r.ends[rec.Partition] = true
					return
				}
				var o outRec
				if err := json.Unmarshal(rec.Value, &o); err != nil || o.Key != string(rec.Key) {
					r.bad = append(r.bad, fmt.Sprintf("%d@%d key %q value %q", rec.Partition, rec.Offset, rec.Key, rec.Value))
					return
				}
				o.partition, o.offset, o.producer, o.epoch = rec.Partition, rec.Offset, rec.ProducerID, rec.ProducerEpoch
				r.recs = append(r.recs, o)
				ks := r.distinct[o.Key]
				if ks == nil {
					ks = map[int64]bool{}
					r.distinct[o.Key] = ks
				}
				if !ks[o.Count] {
					ks[o.Count] = true
					r.ndist++
				}
			})
			close(r.changed)
			r.changed = make(chan struct{})
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *outputReader) Stop() {
	r.stop()
	<-r.done
}

// Progress returns the records read and the distinct (key, count) pairs
// among them.
func (r *outputReader) Progress() (records, distinct int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.recs), r.ndist
}

// WaitFor waits until cond holds for (records, distinct), or ctx ends.
func (r *outputReader) WaitFor(ctx context.Context, cond func(records, distinct int) bool) error {
	for {
		r.mu.Lock()
		ok := cond(len(r.recs), r.ndist)
		ch, err := r.changed, r.err
		r.mu.Unlock()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// Finish writes an end record into every partition in a transaction and
// waits until the reader has read them all; then it stops the reader and
// returns everything it read. Call it once no worker runs.
func (r *outputReader) Finish(ctx context.Context, c *testcluster.Cluster) []outRec {
	r.t.Helper()
	p := c.Client(r.t,
		kgo.TransactionalID(testcluster.UniqueName(r.t, "end")),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err := p.BeginTransaction(); err != nil {
		r.t.Fatal(err)
	}
	for part := range r.partitions {
		rec := &kgo.Record{Topic: r.topic, Partition: part, Key: []byte(endKey)}
		if err := p.ProduceSync(ctx, rec).FirstErr(); err != nil {
			r.t.Fatalf("write end record to %s/%d: %v", r.topic, part, err)
		}
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		r.t.Fatalf("commit end records: %v", err)
	}
	err := r.WaitFor(ctx, func(int, int) bool { return len(r.ends) == int(r.partitions) })
	r.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.t.Fatalf("reading %s to its end records (read_committed: every transaction before them must end): %v; end records seen on %d of %d partitions",
			r.topic, err, len(r.ends), r.partitions)
	}
	if len(r.bad) > 0 {
		r.t.Errorf("%d output records do not parse as the count job's JSON, first: %s", len(r.bad), r.bad[0])
	}
	return slices.Clone(r.recs)
}

// --- the check ------------------------------------------------------------------

// readInput reads topic (want records) and returns each key's values in
// offset order.
func readInput(ctx context.Context, t *testing.T, c *testcluster.Cluster, topic string, want int64) map[string][]int64 {
	t.Helper()
	cl := c.Client(t,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	in := map[string][]int64{}
	var n int64
	for n < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read input %s: %d of %d records: %v", topic, n, want, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("read input %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(rec *kgo.Record) {
			v, err := strconv.ParseInt(string(rec.Value), 10, 64)
			if err != nil {
				t.Fatalf("input %d@%d: value %q: %v", rec.Partition, rec.Offset, rec.Value, err)
			}
			in[string(rec.Key)] = append(in[string(rec.Key)], v)
			n++
		})
	}
	if n != want {
		t.Fatalf("input %s holds %d records, the generator wrote %d", topic, n, want)
	}
	return in
}

// eoReport is what the exactly-once check found.
type eoReport struct {
	In, Out     int64
	Duplicates  int64 // extra copies of a (key, count) pair
	Missing     int64 // (key, count) pairs with count in 1..n never written
	Unexpected  int64 // unknown keys, counts outside 1..n
	WrongSums   int64 // sum differs from the sum of the key's first count values
	OutOfOrder  int64 // a key's counts not increasing in offset order
	Examples    []string
	keysChecked int
}

func (r eoReport) String() string {
	return fmt.Sprintf("records in %d, records out %d, duplicates %d, missing %d, unexpected %d, wrong sums %d, out of order %d",
		r.In, r.Out, r.Duplicates, r.Missing, r.Unexpected, r.WrongSums, r.OutOfOrder)
}

func (r *eoReport) example(format string, args ...any) {
	if len(r.Examples) < 20 {
		r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
	}
}

// checkExactlyOnce compares the count job's output with its input.
func checkExactlyOnce(in map[string][]int64, out []outRec) eoReport {
	var rep eoReport
	prefix := map[string][]int64{} // prefix[k][c] = sum of the first c values
	for k, vs := range in {
		ps := make([]int64, len(vs)+1)
		for i, v := range vs {
			ps[i+1] = ps[i] + v
		}
		prefix[k] = ps
		rep.In += int64(len(vs))
	}
	rep.keysChecked = len(in)
	seen := map[string]map[int64][]outRec{}
	last := map[string]int64{}
	for _, o := range out {
		rep.Out++
		ps, ok := prefix[o.Key]
		n := int64(len(ps) - 1)
		if !ok || o.Count < 1 || o.Count > n {
			rep.Unexpected++
			rep.example("unexpected: key %s count %d (the input has %d records of it) at %s", o.Key, o.Count, n, o.where())
			continue
		}
		if seen[o.Key] == nil {
			seen[o.Key] = map[int64][]outRec{}
		}
		if prev := seen[o.Key][o.Count]; len(prev) > 0 {
			rep.Duplicates++
			rep.example("duplicate: key %s count %d sum %d at %s, first sum %d at %s", o.Key, o.Count, o.Sum, o.where(), prev[0].Sum, prev[0].where())
		}
		seen[o.Key][o.Count] = append(seen[o.Key][o.Count], o)
		if o.Sum != ps[o.Count] {
			rep.WrongSums++
			rep.example("wrong sum: key %s count %d sum %d, want %d, at %s", o.Key, o.Count, o.Sum, ps[o.Count], o.where())
		}
		if o.Count <= last[o.Key] {
			rep.OutOfOrder++
		}
		last[o.Key] = o.Count
	}
	for _, k := range slices.Sorted(mapKeys(in)) {
		n := int64(len(in[k]))
		var gaps []string
		for c := int64(1); c <= n; c++ {
			if len(seen[k][c]) == 0 {
				rep.Missing++
				if len(gaps) < 5 {
					gaps = append(gaps, strconv.FormatInt(c, 10))
				}
			}
		}
		if len(gaps) > 0 {
			rep.example("missing: key %s counts %s... of 1..%d", k, strings.Join(gaps, ","), n)
		}
	}
	return rep
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// assertExactlyOnce fails t unless the report shows every input record
// reflected exactly once.
func assertExactlyOnce(t *testing.T, rep eoReport) {
	t.Helper()
	if rep.Duplicates != 0 || rep.Missing != 0 || rep.Unexpected != 0 || rep.WrongSums != 0 || rep.In != rep.Out {
		t.Errorf("output is not exactly-once: %v; examples:\n  %s", rep, strings.Join(rep.Examples, "\n  "))
	}
	if rep.OutOfOrder != 0 {
		// Not an exactly-once violation by itself, but a key's records
		// come from one task in order; report it.
		t.Logf("note: %d output records of a key appear after a higher count", rep.OutOfOrder)
	}
}
