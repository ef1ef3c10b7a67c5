package worker

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/examples/count"
	"github.com/weirstream/weir/internal/testcluster"
)

// TestRefusedSessionTimeout: a session timeout the broker refuses (below
// group.min.session.timeout.ms) fails the worker at once, naming the
// setting, where it used to leave it idle and silent: the group client's
// errors reach nobody unless someone hears them.
func TestRefusedSessionTimeout(t *testing.T) {
	c := testcluster.Kafka(t)
	in, out := testcluster.UniqueName(t, "in"), testcluster.UniqueName(t, "out")
	c.CreateTopics(t, 2, in, out)
	cfg := DefaultConfig()
	cfg.Job, cfg.Name, cfg.Brokers, cfg.Input, cfg.Output = "count", testcluster.UniqueName(t, "count"), c.Brokers, in, out
	cfg.Checkpoints, cfg.StateBackend, cfg.StateDir = "file://"+t.TempDir(), stateBackendMemory, t.TempDir()
	cfg.SessionTimeout, cfg.HeartbeatInterval, cfg.HTTPAddr = 2*time.Second, 500*time.Millisecond, "off"
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := Run(ctx, cfg, []Job{NewJob("count", count.Build)},
		Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "--session-timeout 2s") || !strings.Contains(err.Error(), "INVALID_SESSION_TIMEOUT") {
		t.Fatalf("Run: %v, want an error naming --session-timeout 2s", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the worker failed only when the test's time ran out: %v", err)
	}
}

// TestWorkersOfAnotherStorageRefused: two workers of one job, each with
// checkpoints in a directory of its own (the default, on two hosts): a
// task moved between them would start over, its output written again. The
// group's leader refuses, and its worker fails, saying why.
func TestWorkersOfAnotherStorageRefused(t *testing.T) {
	c := testcluster.Kafka(t)
	in, out := testcluster.UniqueName(t, "in"), testcluster.UniqueName(t, "out")
	c.CreateTopics(t, 2, in, out)
	name := testcluster.UniqueName(t, "count")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	errs := make(chan error, 2)
	for range 2 {
		cfg := DefaultConfig()
		cfg.Job, cfg.Name, cfg.Brokers, cfg.Input, cfg.Output = "count", name, c.Brokers, in, out
		cfg.Checkpoints, cfg.StateBackend, cfg.StateDir = "file://"+t.TempDir(), stateBackendMemory, t.TempDir()
		cfg.SessionTimeout, cfg.HeartbeatInterval, cfg.HTTPAddr = 6*time.Second, time.Second, "off"
		go func() {
			errs <- Run(ctx, cfg, []Job{NewJob("count", count.Build)}, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		}()
	}
	err := <-errs
	cancel()
	<-errs
	t.Logf("first worker to end: %v", err)
	if err == nil || !strings.Contains(err.Error(), "checkpoints to another storage than this worker") {
		t.Fatalf("first worker to end: %v; want the leader's refusal", err)
	}
}
