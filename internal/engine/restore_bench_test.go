package engine_test

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// BenchmarkRestoreToFirstRecord measures a restore as a worker sees it: a
// keyed job writes 1 GiB of Pebble state (1M keys, 1 KiB incompressible
// values; 4 GiB when named) and stops after its final checkpoint in file:// storage; then a
// new run of the job on an empty state directory restores that checkpoint
// (parallel download, checksums, open) and goes on reading. Reported: the
// time from Run until the keyed operator has processed its first record, and
// the checkpoint's size. WEIR_BENCH_STORAGE=s3 puts the checkpoints in S3
// (WEIR_S3_ENDPOINT, else an in-process S3 server over HTTP on 127.0.0.1).
//
//	go test ./runtime -run '^$' -bench RestoreToFirstRecord -benchtime 3x
//	go test ./runtime -run '^$' -bench RestoreToFirstRecord/state=4GB -benchtime 3x -timeout 30m
//	WEIR_BENCH_STORAGE=s3 go test ./runtime -run '^$' -bench RestoreToFirstRecord -benchtime 3x
func BenchmarkRestoreToFirstRecord(b *testing.B) {
	for _, gb := range []int64{1, 4} {
		b.Run(fmt.Sprintf("state=%dGB", gb), func(b *testing.B) {
			if gb > 1 && !strings.Contains(flag.Lookup("test.bench").Value.String(), fmt.Sprintf("state=%dGB", gb)) {
				b.Skipf("run with -bench RestoreToFirstRecord/state=%dGB", gb)
			}
			benchRestore(b, gb<<20)
		})
	}
}

func benchRestore(b *testing.B, keys int64) {
	const valSize = 1 << 10
	st := benchStorage(b)
	// build makes the job over records [0, n); first is closed when the
	// keyed operator starts processing.
	build := func(n int64, first chan struct{}) *engine.Plan {
		var once sync.Once
		onRecord := func() {}
		if first != nil {
			onRecord = func() { once.Do(func() { close(first) }) }
		}
		return valueStoreJob(b, "restore", stream.GeneratorSource(n, func(_ int, i int64) int64 { return i }), keys, valSize, onRecord)
	}
	cfg := func() engine.Config {
		return engine.Config{
			Tasks: []int{0}, Storage: st, StateDir: b.TempDir(), StateBackend: state.NewPebble(state.PebbleOptions{}),
			Checkpoint: checkpoint.Config{Interval: time.Hour}, // only the final one
		}
	}
	start := time.Now()
	if err := engine.Run(b.Context(), build(keys, nil), cfg()); err != nil {
		b.Fatal(err)
	}
	ids, _, err := checkpoint.ListCheckpoints(b.Context(), st, "restore", 0)
	if err != nil || len(ids) == 0 {
		b.Fatalf("no checkpoint: %v", err)
	}
	m, err := checkpoint.ReadManifest(b.Context(), st, "restore", 0, ids[len(ids)-1])
	if err != nil {
		b.Fatal(err)
	}
	var size int64
	for _, a := range m.Operators {
		if a.State != nil {
			size += a.State.Size
		}
	}
	b.Logf("wrote %d keys and checkpointed %.1f MB in %v", keys, float64(size)/(1<<20), time.Since(start).Round(time.Millisecond))

	var took []time.Duration
	for b.Loop() {
		first := make(chan struct{})
		c := cfg()
		c.Drain = first // stop once the first record went through
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- engine.Run(b.Context(), build(keys+1, first), c) }()
		select {
		case <-first:
			took = append(took, time.Since(start))
		case err := <-done:
			b.Fatalf("the restored run ended before its first record: %v", err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		// The run drained: its final checkpoint is now the newest. Remove
		// it so that every round restores the same 1 GiB checkpoint.
		ids, _, err := checkpoint.ListCheckpoints(b.Context(), st, "restore", 0)
		if err != nil {
			b.Fatal(err)
		}
		for _, id := range ids[1:] {
			if err := st.Delete(b.Context(), checkpoint.ManifestName("restore", 0, id)); err != nil {
				b.Fatal(fmt.Errorf("reset to checkpoint %d: %w", ids[0], err))
			}
		}
	}
	var sum time.Duration
	for _, d := range took {
		sum += d
	}
	b.ReportMetric(float64(sum.Milliseconds())/float64(len(took))/1000, "restore-to-first-record-s")
	b.ReportMetric(float64(size)/(1<<20), "state-MB")
}

// valueStoreJob is the job of the state benchmarks: record i sets key
// i%keys to valSize incompressible bytes derived from i. onRecord, if not
// nil, runs before each record.
func valueStoreJob(b *testing.B, name string, src engine.SourceFactory[int64], keys int64, valSize int, onRecord func()) *engine.Plan {
	job := stream.NewJob(name)
	in := stream.Source(job, "numbers", src)
	keyed := stream.KeyByPartitioned(in, "by-key", func(i int64) uint64 { return uint64(i % keys) }, state.Uint64())
	out := stream.Process(keyed, "store", func(s *stream.Setup) (stream.Processor[uint64, int64, int64], error) {
		v, err := stream.ValueState(s, "v", state.Bytes())
		val := make([]byte, valSize)
		return stream.Processor[uint64, int64, int64]{
			Process: func(_ *stream.Context[uint64, int64], i int64) error {
				if onRecord != nil {
					onRecord()
				}
				randomValue(i, val)
				return v.Set(val)
			},
		}, err
	})
	stream.Sink(out, "out", stream.DiscardSink[int64]())
	plan, err := job.Build()
	if err != nil {
		b.Fatal(err)
	}
	return plan
}

// randomValue fills val with incompressible bytes derived from i.
func randomValue(i int64, val []byte) {
	r := rand.New(rand.NewPCG(uint64(i), 1))
	for j := 0; j+8 <= len(val); j += 8 {
		binary.LittleEndian.PutUint64(val[j:], r.Uint64())
	}
}

// benchStorage is file:// storage in a temporary directory, or with
// WEIR_BENCH_STORAGE=s3 a bucket of testcluster.S3.
func benchStorage(b *testing.B) checkpoint.Storage {
	switch kind := os.Getenv("WEIR_BENCH_STORAGE"); kind {
	case "", "file":
		st, err := checkpoint.NewFile(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		return st
	case "s3":
		bk := testcluster.S3(b)
		opts := checkpoint.S3Options{Bucket: bk.Name, Prefix: bk.Prefix, Region: bk.Region, Endpoint: bk.Endpoint, PathStyle: true}
		if bk.AccessKey != "" {
			opts.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: bk.AccessKey, SecretAccessKey: bk.SecretKey, Source: "bench"}, nil
			})
		}
		st, err := checkpoint.NewS3(b.Context(), opts)
		if err != nil {
			b.Fatal(err)
		}
		return st
	default:
		b.Fatalf("WEIR_BENCH_STORAGE=%q: want file or s3", kind)
		return nil
	}
}
