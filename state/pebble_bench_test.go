package state

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// BenchmarkPebbleCheckpoint fills a Pebble backend with the given state
// (1 KiB incompressible values), then runs checkpoint cycles: Snapshot (the
// pause), Upload to file storage in the background while 1% of the keys are
// updated at random, Release. One op is one cycle. It reports the Snapshot
// pause (p50, p99), the longest single write or read of each cycle (closing
// the write window applies its batch there), the background cut, the
// checkpoint's duration (Snapshot until its upload is done), the bytes each
// checkpoint uploaded against the full size, and the time to restore a
// checkpoint (taken once the LSM is settled and the backend stopped) onto an
// empty directory (restore-s) and onto the directory of the backend that
// took it (restore-local-s, reusing its SSTs: restore-reused-% of the
// bytes), side by side.
//
//	go test ./state/ -run '^$' -bench PebbleCheckpoint -benchtime 20x
//	WEIR_BENCH_MEMTABLE_MB=16 go test ./state/ -run '^$' -bench PebbleCheckpoint/state=1024MB -benchtime 20x
//	WEIR_BENCH_CUT=wal go test ./state/ -run '^$' -bench PebbleCheckpoint/state=1024MB -benchtime 20x
//	WEIR_BENCH_INTERVAL=1s go test ./state/ -run '^$' -bench PebbleCheckpoint/state=1024MB -benchtime 20x
//	go test ./state/ -run '^$' -bench PebbleCheckpoint/state=4096MB -benchtime 20x -timeout 60m
//
// The 4096MB case (minutes to fill, 4+ GB of disk twice over) runs only when
// -bench names it.
func BenchmarkPebbleCheckpoint(b *testing.B) {
	for _, mb := range []int{64, 256, 1024, 4096} {
		b.Run(fmt.Sprintf("state=%dMB", mb), func(b *testing.B) {
			if mb > 1024 && !strings.Contains(flag.Lookup("test.bench").Value.String(), fmt.Sprintf("state=%dMB", mb)) {
				b.Skipf("run with -bench PebbleCheckpoint/state=%dMB", mb)
			}
			benchCheckpoint(b, mb<<20)
		})
	}
}

func benchCheckpoint(b *testing.B, size int) {
	ctx := context.Background()
	const valSize = 1 << 10
	keys := size / valSize
	st, err := checkpoint.NewFile(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	opts := PebbleOptions{MemTableSize: benchMemtable(), Cut: benchCut(b)}
	p, err := OpenPebble(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	v := mustValue(b, p, "v")
	r := rand.New(rand.NewPCG(1, uint64(size)))
	val := make([]byte, valSize)
	key := make([]byte, 8)
	put := func(i int) {
		binary.BigEndian.PutUint64(key, uint64(i)*0x9E3779B97F4A7C15) // scattered
		for j := 0; j < valSize; j += 8 {
			binary.LittleEndian.PutUint64(val[j:], r.Uint64())
		}
		if err := v.Put(key, val); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	for i := range keys {
		put(i)
	}
	fill := time.Since(start)
	var id checkpoint.ID
	cycle := func() (*PebbleSnapshot, checkpoint.StateHandle) {
		id++
		s, err := p.Snapshot(id)
		if err != nil {
			b.Fatal(err)
		}
		dir := fmt.Sprintf("chk-%d/op/", id)
		h, err := s.Upload(ctx, st, dir, "shared/op/")
		s.Release()
		if err != nil {
			b.Fatal(err)
		}
		return s.(*PebbleSnapshot), h
	}
	s, first := cycle() // the full upload
	firstPause := s.Pause()
	b.Logf("cut %v: filled %d MB in %v; first checkpoint: pause %v, %d files, %.1f MB",
		opts.Cut, size>>20, fill.Round(time.Millisecond), firstPause.Round(time.Microsecond), len(first.Files), float64(first.Size)/(1<<20))

	// Each cycle runs as a task would: Snapshot at the barrier, upload in
	// the background while the next 1% of keys are written (into the write
	// window until the cut is done; the write that closes the window
	// applies it), then the next record's read.
	interval := benchInterval(b)
	var pauses, hiccups, cuts, applies, durations []time.Duration
	var uploaded, total, mutable int64
	for b.Loop() {
		id++
		p.lastApply = 0
		began := time.Now()
		s, err := p.Snapshot(id)
		if err != nil {
			b.Fatal(err)
		}
		pauses = append(pauses, s.(*PebbleSnapshot).Pause())
		var h checkpoint.StateHandle
		var uerr error
		up := make(chan struct{})
		go func() {
			defer close(up)
			h, uerr = s.Upload(ctx, st, fmt.Sprintf("chk-%d/op/", id), "shared/op/")
			durations = append(durations, time.Since(began))
			s.Release()
		}()
		var worst time.Duration
		timed := func(f func()) {
			t0 := time.Now()
			f()
			worst = max(worst, time.Since(t0))
		}
		// Paced: the writes spread over the interval, as a job's would.
		start := time.Now()
		for i := range keys / 100 {
			timed(func() { put(r.IntN(keys)) })
			if interval > 0 && i%64 == 63 {
				time.Sleep(time.Until(start.Add(interval * time.Duration(i) / time.Duration(keys/100))))
			}
		}
		<-up
		if uerr != nil {
			b.Fatal(uerr)
		}
		timed(func() {
			if _, _, err := v.Get(key); err != nil {
				b.Fatal(err)
			}
		})
		hiccups = append(hiccups, worst)
		applies = append(applies, p.lastApply)
		cuts = append(cuts, s.(*PebbleSnapshot).CutTime())
		uploaded += h.Incremental
		total += h.Size
		for _, f := range h.Files {
			if !isShared(f.Local) {
				mutable += f.Size
			}
		}
	}
	b.StopTimer()
	b.Logf("pauses in order: %v", roundAll(pauses))
	b.Logf("longest write or read per cycle, in order: %v", roundAll(hiccups))
	b.Logf("cuts in order: %v", roundAll(cuts))
	b.Logf("window applies in order: %v", roundAll(applies))
	pct := func(d []time.Duration, q float64) float64 {
		d = slices.Clone(d)
		slices.Sort(d)
		return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000
	}
	n := float64(len(pauses))
	b.ReportMetric(pct(pauses, 0.5), "pause-p50-ms")
	b.ReportMetric(pct(pauses, 0.99), "pause-p99-ms")
	b.ReportMetric(pct(hiccups, 0.5), "op-max-p50-ms")
	b.ReportMetric(pct(hiccups, 0.99), "op-max-p99-ms")
	b.ReportMetric(pct(applies, 0.5), "apply-p50-ms")
	b.ReportMetric(pct(applies, 0.99), "apply-p99-ms")
	b.ReportMetric(pct(durations, 0.5), "checkpoint-p50-ms")
	b.ReportMetric(pct(durations, 0.99), "checkpoint-p99-ms")
	b.ReportMetric(pct(cuts, 0.5), "cut-p50-ms")
	b.ReportMetric(pct(cuts, 0.99), "cut-p99-ms")
	b.ReportMetric(float64(uploaded)/n/(1<<20), "upload-MB/ckpt")
	b.ReportMetric(float64(total)/n/(1<<20), "size-MB")
	b.ReportMetric(100*float64(uploaded)/float64(total), "upload-%")
	b.ReportMetric(float64(mutable)/n/(1<<10), "mutable-KB/ckpt")

	// The fill outruns compactions: the cycles above ran with most of the
	// state in L0, and the compactions still running rewrite nearly every
	// SST before Close. Settle the LSM as a long-running store's is, then
	// write 1% of the keys before each of three checkpoints, and stop the
	// backend right after the last one, as a task does on SIGTERM. Restore
	// that checkpoint onto an empty directory (every file downloaded) and
	// onto a directory holding the stopped backend's DB (the SSTs it still
	// has are reused), side by side: each round starts from the same files
	// (hard-linked copies of that DB) and the rounds alternate, so both meet
	// the same page cache and disk; each figure is the median.
	if err := p.flushValues(); err != nil { // the value caches' writes, into the DB the test works on
		b.Fatal(err)
	}
	if err := p.db.Compact(ctx, []byte{0}, []byte{0xff}, false); err != nil {
		b.Fatal(err)
	}
	var final checkpoint.StateHandle
	for range 3 {
		for range keys / 100 {
			put(r.IntN(keys))
		}
		_, final = cycle()
	}
	if err := p.Close(); err != nil {
		b.Fatal(err)
	}
	prev := filepath.Join(b.TempDir(), filepath.Base(p.dbDir))
	linkDir(b, p.dbDir, prev)
	var empty, local []time.Duration
	var reused int64
	for range 3 {
		dir := b.TempDir()
		empty = append(empty, benchRestore(b, dir, opts, st, final).Took)
		os.RemoveAll(dir)
		dir = b.TempDir()
		linkDir(b, prev, filepath.Join(dir, filepath.Base(prev)))
		s := benchRestore(b, dir, opts, st, final)
		local = append(local, s.Took)
		reused = s.ReusedBytes
		os.RemoveAll(dir)
	}
	b.Logf("restores onto an empty directory: %v; onto the stopped backend's: %v (%.1f of %.1f MB reused)",
		roundAll(empty), roundAll(local), float64(reused)/(1<<20), float64(final.Size)/(1<<20))
	b.ReportMetric(pct(empty, 0.5)/1000, "restore-s")
	b.ReportMetric(pct(local, 0.5)/1000, "restore-local-s")
	b.ReportMetric(100*float64(reused)/float64(final.Size), "restore-reused-%")
}

// linkDir makes dst a copy of the flat directory src by hard links.
func linkDir(b *testing.B, src, dst string) {
	ents, err := os.ReadDir(src)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, e := range ents {
		if err := os.Link(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			b.Fatal(err)
		}
	}
}

// benchRestore opens a backend in dir, restores h there, closes the backend
// (which leaves its DB in dir) and tells what the restore did.
func benchRestore(b *testing.B, dir string, opts PebbleOptions, st checkpoint.Storage, h checkpoint.StateHandle) RestoreStats {
	q, err := OpenPebble(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	mustValue(b, q, "v")
	if err := q.Restore(context.Background(), st, h); err != nil {
		b.Fatal(err)
	}
	if err := q.Close(); err != nil {
		b.Fatal(err)
	}
	return q.LastRestore()
}

// benchMemtable is the memtable size to benchmark with, from
// WEIR_BENCH_MEMTABLE_MB (0: the backend's default): the memtable bounds the
// flush in the pause.
func benchMemtable() int64 {
	var mb int64
	fmt.Sscan(os.Getenv("WEIR_BENCH_MEMTABLE_MB"), &mb)
	return mb << 20
}

// benchCut is the cut to benchmark, from WEIR_BENCH_CUT (wal or flush;
// empty: the backend's default).
func benchCut(b *testing.B) PebbleCut {
	switch c := os.Getenv("WEIR_BENCH_CUT"); c {
	case "":
		return PebbleCutDefault
	case "wal":
		return PebbleCutWAL
	case "flush":
		return PebbleCutFlush
	default:
		b.Fatalf("WEIR_BENCH_CUT=%q: want wal or flush", c)
		return 0
	}
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(100 * time.Microsecond)
	}
	return out
}

// benchInterval is the checkpoint interval to pace each cycle's writes over,
// from WEIR_BENCH_INTERVAL (a duration; empty: no pacing, the writes come as
// fast as they can, all inside the write window if the cut outlasts them).
func benchInterval(b *testing.B) time.Duration {
	s := os.Getenv("WEIR_BENCH_INTERVAL")
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		b.Fatalf("WEIR_BENCH_INTERVAL=%q: %v", s, err)
	}
	return d
}
