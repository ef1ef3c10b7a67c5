package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/worker"
)

// TestRunDrains: closing the drain channel (what SIGTERM does) makes `run`
// stop its sources, take a final checkpoint and commit it, and return nil:
// the output is complete and no transaction is left open.
func TestRunDrains(t *testing.T) {
	ctx, c, in, out := drainInput(t, 2)
	var stderr strings.Builder
	cfg, err := worker.Parse([]string{
		"--job", "count", "--http-addr", "off", "--tasks", "0,1",
		"--name", testcluster.UniqueName(t, "count"), "--brokers", strings.Join(c.Brokers, ","),
		"--input", in, "--output", out, "--state-dir", t.TempDir(), "--checkpoints", "file://" + t.TempDir(),
		// Checkpoints far apart: only the drain's final checkpoint can
		// commit the output in time.
		"--interval", "1m", "--tolerable-failures", "0", "--checkpoint-timeout", "30s", "--txn-timeout", "5m",
	}, env(), &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	drain := make(chan struct{})
	st := &worker.Stats{}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	done := make(chan error, 1)
	go func() { done <- worker.Run(ctx, cfg, jobs, worker.Options{Drain: drain, Stats: st, Logger: log}) }()
	waitRead(t, st, 3000)
	close(drain)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("drained run: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("run did not return after the drain")
	}
	v, err := verify(ctx, c.Brokers, "count", in, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(v)
	if v.In != 3000 || v.Out != 3000 || !v.Clean() || len(v.Notes) > 0 {
		t.Fatalf("after the drain: %v (notes %q), want all 3000 committed exactly once and nothing open", v, v.Notes)
	}
}

// stalledManifests is checkpoint storage whose manifest writes wait for
// their context's end once stall is set: a final checkpoint that cannot
// complete within --handoff-timeout (a slow S3, a full disk).
type stalledManifests struct {
	checkpoint.Storage
	stall atomic.Bool
}

func (s *stalledManifests) PutIfAbsent(ctx context.Context, name string, data []byte) error {
	if s.stall.Load() && strings.HasSuffix(name, "manifest.json") {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Storage.PutIfAbsent(ctx, name, data)
}

// TestRunDrainIncomplete: a drain whose final checkpoint does not complete
// within --handoff-timeout stops the task where it is, its output not
// committed. run must not return nil then: exit 0 after a drain says every
// task committed a final checkpoint, which an operator relies on before
// lowering --pool-size, changing --delivery or removing a sink.
func TestRunDrainIncomplete(t *testing.T) {
	ctx, c, in, out := drainInput(t, 1)
	dir := t.TempDir()
	base, err := checkpoint.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	st := &stalledManifests{Storage: base}
	var stderr strings.Builder
	cfg, err := worker.Parse([]string{
		"--job", "count", "--http-addr", "off", "--tasks", "0",
		"--name", testcluster.UniqueName(t, "count"), "--brokers", strings.Join(c.Brokers, ","),
		"--input", in, "--output", out, "--state-dir", t.TempDir(), "--checkpoints", "file://" + dir,
		"--interval", "1m", "--tolerable-failures", "0", "--checkpoint-timeout", "30s", "--txn-timeout", "5m",
		"--handoff-timeout", "2s",
	}, env(), &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	drain := make(chan struct{})
	stats := &worker.Stats{}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(ctx, cfg, jobs, worker.Options{Drain: drain, Stats: stats, Logger: log, Storage: st})
	}()
	waitRead(t, stats, 3000)
	st.stall.Store(true)
	close(drain)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "drain incomplete: task 0:") {
			t.Fatalf("run after a drain with no final checkpoint: %v; want an error naming task 0", err)
		}
		if code := worker.ExitCode(err, io.Discard); code == 0 {
			t.Fatalf("exit code 0 for %v", err)
		}
	case <-ctx.Done():
		t.Fatal("run did not return after the drain")
	}
}

// drainInput makes an input and an output topic of partitions partitions
// and writes 3000 records of the count job to the input.
func drainInput(t *testing.T, partitions int32) (ctx context.Context, c *testcluster.Cluster, in, out string) {
	t.Helper()
	ctx = testCtx(t, 2*time.Minute)
	c = testcluster.Kafka(t)
	in, out = testcluster.UniqueName(t, "in"), testcluster.UniqueName(t, "out")
	c.CreateTopics(t, partitions, in, out)
	if _, err := generate(ctx, generateConfig{Brokers: c.Brokers, Topic: in, Job: "count", Records: 3000, Keys: 11, Batch: 500}, nil); err != nil {
		t.Fatal(err)
	}
	return ctx, c, in, out
}

// waitRead waits until the worker has read n input records. There is no
// event for it; poll with the test's deadline.
func waitRead(t *testing.T, st *worker.Stats, n int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for recordsIn(st) < n {
		if time.Now().After(deadline) {
			t.Fatalf("worker read %d of %d records in a minute", recordsIn(st), n)
		}
		time.Sleep(10 * time.Millisecond) // polling a counter, not synchronising
	}
}
