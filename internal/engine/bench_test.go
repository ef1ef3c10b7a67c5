package engine_test

import (
	"encoding/binary"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/partition"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

type pauses struct {
	engine.NopObserver
	mu sync.Mutex
	d  []time.Duration
}

func (p *pauses) BarrierPause(_ string, _ int, _ checkpoint.ID, d time.Duration) {
	p.mu.Lock()
	p.d = append(p.d, d)
	p.mu.Unlock()
}

func (p *pauses) quantile(q float64) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.d) == 0 {
		return 0
	}
	s := slices.Clone(p.d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// benchBackend is the memory backend, or with WEIR_PREFETCH=0 the memory
// backend without its Prefetcher, so that one command line can compare both:
//
//	for i in 1 2 3; do for p in 0 1; do WEIR_PREFETCH=$p go test ./runtime -run '^$' -bench KeyedCount -cpu 1 -benchtime 20000000x; done; done
func benchBackend() state.Factory {
	f := state.NewMemory(state.MemoryOptions{})
	if os.Getenv("WEIR_PREFETCH") == "0" {
		return withoutPrefetch(f)
	}
	return f
}

// BenchmarkKeyedCount runs source -> Map -> KeyBy -> keyed count (memory
// state, 1M keys, and 64K keys for comparison) -> discarding sink on one
// task, with checkpoints off and every second. Checkpoints go to file://
// storage: a full snapshot of 1M keys is over the memory storage's 5 MB. Run
// with -cpu 1 for the per-core rate:
//
//	go test ./runtime -run '^$' -bench KeyedCount -cpu 1 -benchtime 20000000x
//
// keys=1M/on-vs-off measures the cost of checkpoints side by side: b.N
// records with checkpoints off, then every second, in turns (off, on, on,
// off, ...) for WEIR_BENCH_PAIRS pairs (default 3), so that a drift of the
// machine's speed weighs on both. It reports the median rate of each, their
// ratio in percent, and the p99 pause of the runs with checkpoints; -v logs
// every run:
//
//	go test ./runtime -run '^$' -bench 'KeyedCount/keys=1M/on-vs-off' -cpu 1 -benchtime 30000000x
func BenchmarkKeyedCount(b *testing.B) {
	for _, bc := range []struct {
		name     string
		keys     uint64
		interval time.Duration
	}{
		{"keys=1M/checkpoints=off", 1 << 20, 0},
		{"keys=1M/checkpoints=1s", 1 << 20, time.Second},
		// State that fits in cache: what the runtime itself costs per record
		// when a state access is not a trip to DRAM.
		{"keys=64K/checkpoints=off", 1 << 16, 0},
		{"keys=64K/checkpoints=1s", 1 << 16, time.Second},
	} {
		b.Run(bc.name, func(b *testing.B) {
			obs := &pauses{}
			elapsed := runKeyedCount(b, bc.keys, b.N, bc.interval, obs)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
			b.ReportMetric(float64(obs.quantile(0.99).Microseconds()), "p99-pause-µs")
			b.ReportMetric(float64(len(obs.d)), "barriers")
		})
	}
	b.Run("keys=1M/on-vs-off", func(b *testing.B) {
		pairs := 3
		if s := os.Getenv("WEIR_BENCH_PAIRS"); s != "" {
			var err error
			if pairs, err = strconv.Atoi(s); err != nil || pairs < 1 {
				b.Fatalf("WEIR_BENCH_PAIRS=%q: want a positive number", s)
			}
		}
		var off, on []float64
		obs := &pauses{}
		for i := range 2 * pairs {
			// off on on off off on ...
			if (i+1)/2%2 == 0 {
				off = append(off, float64(b.N)/runKeyedCount(b, 1<<20, b.N, 0, &pauses{}).Seconds())
				b.Logf("leg %d: checkpoints off: %.0f records/s", i, off[len(off)-1])
			} else {
				on = append(on, float64(b.N)/runKeyedCount(b, 1<<20, b.N, time.Second, obs).Seconds())
				b.Logf("leg %d: checkpoints 1s: %.0f records/s", i, on[len(on)-1])
			}
		}
		// Medians: on a shared machine a leg now and then runs far slower
		// than the others, for reasons of its own.
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(median(off), "off-records/s")
		b.ReportMetric(median(on), "on-records/s")
		b.ReportMetric(100*median(on)/median(off), "on/off-%")
		b.ReportMetric(float64(obs.quantile(0.99).Microseconds()), "p99-pause-µs")
	})
}

// BenchmarkKeyCheck measures the cost of the keyed invariant's check
// (every KeyBy's key hashed with the input's partitioner, murmur2, and
// compared with the task) on the keyed count of BenchmarkKeyedCount, 1M
// keys, checkpoints off: b.N records with the check off (Partitions 0) and
// on (Partitions 8, task 0 of 8) in turns (off, on, on, off, ...) for
// WEIR_BENCH_PAIRS pairs (default 3), so that a drift of the machine's
// speed weighs on both. Both run the same keys, all of which murmur2 puts
// in partition 0 of 8, so no record fails the check. It reports the median
// ns per record of each and their ratio; -v logs every run:
//
//	go test ./runtime -run '^$' -bench KeyCheck -cpu 1 -benchtime 20000000x
func BenchmarkKeyCheck(b *testing.B) {
	pairs := 3
	if s := os.Getenv("WEIR_BENCH_PAIRS"); s != "" {
		var err error
		if pairs, err = strconv.Atoi(s); err != nil || pairs < 1 {
			b.Fatalf("WEIR_BENCH_PAIRS=%q: want a positive number", s)
		}
	}
	table := keysOfTask0()
	keyOf := func(n uint64) uint64 { return table[n%uint64(len(table))] }
	var off, on []float64
	for i := range 2 * pairs {
		if (i+1)/2%2 == 0 {
			off = append(off, float64(runKeyedCountWith(b, keyOf, 0, b.N, 0, &pauses{}).Nanoseconds())/float64(b.N))
			b.Logf("leg %d: check off: %.1f ns/record", i, off[len(off)-1])
		} else {
			on = append(on, float64(runKeyedCountWith(b, keyOf, checkPartitions, b.N, 0, &pauses{}).Nanoseconds())/float64(b.N))
			b.Logf("leg %d: check on: %.1f ns/record", i, on[len(on)-1])
		}
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(off), "off-ns/record")
	b.ReportMetric(median(on), "on-ns/record")
	b.ReportMetric(median(on)-median(off), "check-ns/record")
	b.ReportMetric(100*median(on)/median(off), "on/off-%")
}

// checkPartitions is BenchmarkKeyCheck's partition count.
const checkPartitions = 8

// keysOfTask0 are the 1M smallest keys murmur2 puts in partition 0 of
// checkPartitions, as state.Uint64 encodes them; made once per process.
var keysOfTask0 = sync.OnceValue(func() []uint64 {
	table := make([]uint64, 0, 1<<20)
	for k := uint64(0); len(table) < cap(table); k++ {
		if partition.Murmur2.Partition(binary.BigEndian.AppendUint64(nil, k), checkPartitions) == 0 {
			table = append(table, k)
		}
	}
	return table
})

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// runKeyedCount runs the benchmark's job over n records with checkpoints
// every interval (0: off) and returns how long Run took.
func runKeyedCount(b *testing.B, keys uint64, n int, interval time.Duration, obs *pauses) time.Duration {
	b.Helper()
	return runKeyedCountWith(b, func(n uint64) uint64 { return n % keys }, 0, n, interval, obs)
}

// runKeyedCountWith runs it keyed by keyOf, on task 0 of partitions (0:
// no key check).
func runKeyedCountWith(b *testing.B, keyOf func(uint64) uint64, partitions int, n int, interval time.Duration, obs *pauses) time.Duration {
	b.Helper()
	job := stream.NewJob("bench")
	src := stream.Source(job, "numbers", stream.GeneratorSource(int64(n), func(_ int, i int64) uint64 { return uint64(i) }))
	mapped := stream.Map(src, "scramble", func(n uint64) (uint64, error) { return n * 0x9E3779B97F4A7C15, nil })
	keyed := stream.KeyByPartitioned(mapped, "by-key", keyOf, state.Uint64())
	counts := stream.Process(keyed, "count", func(s *stream.Setup) (stream.Processor[uint64, uint64, int64], error) {
		count, err := stream.ValueState(s, "count", state.Int64())
		return stream.Processor[uint64, uint64, int64]{
			Process: func(ctx *stream.Context[uint64, int64], _ uint64) error {
				c, _, err := count.Get()
				if err != nil {
					return err
				}
				c++
				if err := count.Set(c); err != nil {
					return err
				}
				return ctx.Emit(c)
			},
		}, err
	})
	stream.Sink(counts, "out", stream.DiscardSink[int64]())
	plan, err := job.Build()
	if err != nil {
		b.Fatal(err)
	}
	st, err := checkpoint.NewFile(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	err = engine.Run(b.Context(), plan, engine.Config{
		Tasks:        []int{0},
		Storage:      st,
		Checkpoint:   checkpoint.Config{Interval: interval},
		StateDir:     b.TempDir(),
		StateBackend: benchBackend(),
		Observer:     obs,
		Partitions:   partitions,
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	return elapsed
}
