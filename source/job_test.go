package source_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/source"
	"github.com/weirstream/weir/stream"
)

// committedSink is an in-memory two-phase-commit sink: what a task wrote
// becomes visible only when the checkpoint that pre-committed it completes,
// so a restarted task's replay must neither lose nor repeat a record.
type committedSink struct {
	mu        sync.Mutex
	committed map[string]bool // transaction ids, so a resumed commit is idempotent
	out       []string
	target    int // full is closed once out holds target records
	full      chan struct{}
}

type sinkTxn struct {
	ID     string   `json:"id"`
	Values []string `json:"values"`
}

func (s *committedSink) commit(txns ...sinkTxn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tx := range txns {
		if !s.committed[tx.ID] {
			s.committed[tx.ID] = true
			s.out = append(s.out, tx.Values...)
			if len(s.out) >= s.target && len(s.out)-len(tx.Values) < s.target {
				close(s.full)
			}
		}
	}
}

func (s *committedSink) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.out)
}

func (s *committedSink) factory() engine.SinkFactory[string] {
	var opens atomic.Int64
	return func(_ context.Context, info engine.TaskInfo, restored []checkpoint.Committable) (engine.SinkWriter[string], error) {
		for _, c := range restored {
			var tx sinkTxn
			if err := json.Unmarshal(c.Data, &tx); err != nil {
				return nil, err
			}
			s.commit(tx)
		}
		return &sinkWriter{s: s, info: info, open: opens.Add(1)}, nil
	}
}

type sinkWriter struct {
	s        *committedSink
	info     engine.TaskInfo
	open     int64
	pending  []string
	prepared map[checkpoint.ID]sinkTxn
}

func (w *sinkWriter) Write(_ context.Context, v string) error {
	w.pending = append(w.pending, v)
	return nil
}

func (w *sinkWriter) PreCommit(_ context.Context, id checkpoint.ID) ([]checkpoint.Committable, error) {
	if w.prepared == nil {
		w.prepared = map[checkpoint.ID]sinkTxn{}
	}
	if len(w.pending) > 0 {
		w.prepared[id] = sinkTxn{ID: fmt.Sprintf("%d-%d-%d", w.info.Task, w.open, id), Values: w.pending}
		w.pending = nil
	}
	var out []checkpoint.Committable
	for _, id := range slices.Sorted(mapsKeys(w.prepared)) {
		data, err := json.Marshal(w.prepared[id])
		if err != nil {
			return nil, err
		}
		out = append(out, checkpoint.Committable{Operator: w.info.Operator, Data: data})
	}
	return out, nil
}

func (w *sinkWriter) Commit(_ context.Context, id checkpoint.ID) error {
	for _, pid := range slices.Sorted(mapsKeys(w.prepared)) {
		if pid <= id {
			w.s.commit(w.prepared[pid])
			delete(w.prepared, pid)
		}
	}
	return nil
}

func (w *sinkWriter) Close() error { return nil }

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestRunsInJob runs the source in the runtime: two tasks read a
// two-partition topic, checkpoints run every few milliseconds, and one task
// fails once in the middle and restores from its last checkpoint. The
// committed output must hold every input record exactly once.
func TestRunsInJob(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	createTopics(t, c, 2, topic)
	pr := producer(t, c)
	var want []string
	// Half the records first; the rest once task 1 checkpointed the first
	// half, and task 1 fails on the first of the second half: its restart
	// restores from a real position, not from the start.
	produceHalf := func(from int) {
		for p := range int32(2) {
			vals := values(fmt.Sprintf("p%d-", p), from, from+100)
			for i := 0; i < len(vals); i += 20 { // fetches and polls split them
				produce(t, pr, topic, p, vals[i:i+20]...)
			}
			want = append(want, vals...)
		}
	}
	produceHalf(100)

	factory, err := source.Kafka(source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str, MaxPollRecords: 7, Consumers: shared})
	if err != nil {
		t.Fatal(err)
	}
	var failed atomic.Bool
	obs := &positionObserver{reached: 100, done: make(chan struct{})}
	errInjected := errors.New("injected failure")
	job := stream.NewJob(testcluster.UniqueName(t, "job"))
	in := stream.Source(job, "kafka", factory)
	checked := stream.Map(in, "fail-once", func(v string) (string, error) {
		if strings.HasPrefix(v, "p1-2") && failed.CompareAndSwap(false, true) {
			t.Logf("failing task 1 at %s; its last checkpoint has position %d", v, obs.task1.Load())
			return "", errInjected
		}
		return v, nil
	})
	sink := &committedSink{committed: map[string]bool{}, target: 400, full: make(chan struct{})}
	stream.Sink(checked, "out", sink.factory())
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		done <- engine.Run(ctx, plan, engine.Config{
			Tasks:          []int{0, 1},
			Storage:        checkpoint.NewMemory(checkpoint.MemoryOptions{}),
			Checkpoint:     checkpoint.Config{Interval: 5 * time.Millisecond, Timeout: 10 * time.Second},
			RestartBackoff: time.Millisecond,
			StateDir:       t.TempDir(),
			Observer:       obs,
		})
	}()
	select {
	case <-obs.done:
	case err := <-done:
		t.Fatalf("job ended early: %v", err)
	case <-time.After(waitFor):
		t.Fatalf("task 1 did not checkpoint position 100 within %v", waitFor)
	}
	produceHalf(200)

	select {
	case <-sink.full:
	case err := <-done:
		t.Fatalf("job ended early: %v", err)
	case <-time.After(waitFor):
		t.Errorf("committed %d of %d records within %v", len(sink.snapshot()), len(want), waitFor)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if !failed.Load() {
		t.Fatalf("the injected failure never happened")
	}
	got := sink.snapshot()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("committed %d records, want %d; duplicates or gaps:\n%s", len(got), len(want), diff(got, want))
	}
}

// positionObserver keeps the Kafka position of task 1's latest completed
// checkpoint.
// checkpoint, and closes done once it reached reached.
type positionObserver struct {
	engine.NopObserver
	task1   atomic.Int64
	reached int64
	once    sync.Once
	done    chan struct{}
}

func (o *positionObserver) CheckpointCompleted(_ string, task int, m checkpoint.Manifest) {
	for _, p := range source.ManifestPositions(m) {
		if task == 1 && p.Topic != "" {
			o.task1.Store(p.Offset)
			if p.Offset >= o.reached {
				o.once.Do(func() { close(o.done) })
			}
		}
	}
}

func diff(got, want []string) string {
	count := map[string]int{}
	for _, v := range got {
		count[v]++
	}
	var out []string
	for _, v := range want {
		switch n := count[v]; {
		case n == 0:
			out = append(out, v+" missing")
		case n > 1:
			out = append(out, fmt.Sprintf("%s x%d", v, n))
		}
		delete(count, v)
	}
	for v := range count {
		out = append(out, v+" unexpected")
	}
	return fmt.Sprint(out)
}
