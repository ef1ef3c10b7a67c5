package engine_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
)

// logBuffer collects a run's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// listSink collects every record written, without transactions: the
// at-least-once case, where nothing forbids restoring an older checkpoint.
type listSink struct {
	mu  sync.Mutex
	out []update
}

func (s *listSink) factory() engine.SinkFactory[update] {
	return func(context.Context, engine.TaskInfo, []checkpoint.Committable) (engine.SinkWriter[update], error) {
		return s, nil
	}
}

func (s *listSink) Write(_ context.Context, u update) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out = append(s.out, u)
	return nil
}

func (s *listSink) PreCommit(context.Context, checkpoint.ID) ([]checkpoint.Committable, error) {
	return nil, nil
}
func (s *listSink) Commit(context.Context, checkpoint.ID) error { return nil }
func (s *listSink) Close() error                                { return nil }

// sourceOffset is the position a manifest recorded for the job's source.
func sourceOffset(t *testing.T, m checkpoint.Manifest) int64 {
	t.Helper()
	for _, a := range m.Operators {
		for _, p := range a.Sources {
			return p.Offset
		}
	}
	t.Fatalf("checkpoint %d has no source position", m.Checkpoint)
	return 0
}

// damageNewest breaks one file of the newest checkpoint's keyed state that
// the checkpoint before it does not reference, and returns that checkpoint
// (newest), the one before it (prev) and the file's name. A checkpoint
// whose state did not change since the one before it (a Pebble delta
// snapshot with no changes) has no such file: newest is then the newest
// checkpoint that has one, and the checkpoints after it share the damage.
func damageNewest(t *testing.T, st *checkpoint.File, root, how string) (newest, prev checkpoint.Manifest, file string) {
	t.Helper()
	ctx := t.Context()
	ids, _, err := checkpoint.ListCheckpoints(ctx, st, "count", 0)
	if err != nil || len(ids) < 2 {
		t.Fatalf("want two checkpoints or more, have %v (%v)", ids, err)
	}
	read := func(id checkpoint.ID) checkpoint.Manifest {
		m, err := checkpoint.ReadManifest(ctx, st, "count", 0, id)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for i := len(ids) - 1; i > 0; i-- {
		newest, prev = read(ids[i]), read(ids[i-1])
		inPrev := map[string]bool{}
		for _, a := range prev.Operators {
			if a.State != nil {
				for _, f := range a.State.Files {
					inPrev[f.Name] = true
				}
			}
		}
		for _, a := range newest.Operators {
			if a.Operator != "count" || a.State == nil {
				continue
			}
			for _, f := range a.State.Files {
				if inPrev[f.Name] || f.Size == 0 {
					continue
				}
				path := filepath.Join(root, filepath.FromSlash(f.Name))
				switch how {
				case "missing":
					err = os.Remove(path)
				case "corrupt":
					var b []byte
					if b, err = os.ReadFile(path); err == nil {
						b[len(b)/2] ^= 0xff // same size, another checksum
						err = os.WriteFile(path, b, 0o644)
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				return newest, prev, f.Name
			}
		}
	}
	t.Fatalf("no checkpoint of %v has a state file of its own to damage", ids)
	return
}

// TestUnusableStateFallsBack: a state file of the newest checkpoint is
// corrupt or missing. With no committed output in the way, the task restores
// the checkpoint before it, logging the file; the restored state and source
// position belong together: each key's count continues from that
// checkpoint.
func TestUnusableStateFallsBack(t *testing.T) {
	backends := map[string]func() state.Factory{
		"memory": func() state.Factory { return nil },
		"pebble": func() state.Factory {
			return state.NewPebble(state.PebbleOptions{MemTableSize: 1 << 20, CacheSize: 1 << 20})
		},
	}
	for _, backend := range []string{"memory", "pebble"} {
		for _, how := range []string{"corrupt", "missing"} {
			t.Run(backend+"/"+how, func(t *testing.T) {
				const keys = 10
				root := t.TempDir()
				st, err := checkpoint.NewFile(root)
				if err != nil {
					t.Fatal(err)
				}
				run := func(sink engine.SinkOpener[update], logs *logBuffer, after int64) error {
					obs := &drainAfter{after: after, drain: make(chan struct{})}
					cfg := engine.Config{
						Tasks: []int{0}, Storage: st, StateDir: t.TempDir(), StateBackend: backends[backend](),
						Observer: obs, Drain: obs.drain, Retained: 100, RestartBackoff: time.Millisecond,
						Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond},
					}
					if logs != nil {
						cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
					}
					return engine.Run(t.Context(), countJob(t, 1<<40, keys, 1, nil, sink), cfg)
				}
				if err := run((&listSink{}).factory(), nil, 3); err != nil {
					t.Fatal(err)
				}
				newest, prev, file := damageNewest(t, st, root, how)

				logs := &logBuffer{}
				again := &listSink{}
				if err := run(again.factory(), logs, 1); err != nil {
					t.Fatalf("restore after damaging %s: %v\n%s", file, err, logs)
				}
				if !strings.Contains(logs.String(), file) || !strings.Contains(logs.String(), "falling back") {
					t.Fatalf("no log line names the damaged file %s:\n%s", file, logs)
				}
				// Each key's first count after the restore follows from the
				// records before prev's source position, not newest's.
				pos := sourceOffset(t, prev)
				first := map[uint64]int64{}
				for _, u := range again.out {
					if _, ok := first[u.Key]; !ok {
						first[u.Key] = u.Count
					}
				}
				for k := uint64(0); k < keys; k++ {
					want := pos / keys
					if int64(k) < pos%keys {
						want++
					}
					if first[k] != want+1 {
						t.Fatalf("key %d: first count after restore %d, want %d (checkpoint %d at offset %d; newest was %d at %d)",
							k, first[k], want+1, prev.Checkpoint, pos, newest.Checkpoint, sourceOffset(t, newest))
					}
				}
				t.Logf("damaged (%s) %s of checkpoint %d; restored checkpoint %d at offset %d", how, file, newest.Checkpoint, prev.Checkpoint, pos)
			})
		}
	}
}

// TestUnusableStateWithCommittedOutputFails: the newest checkpoint's state
// is corrupt and its transactions were committed. Restoring an older
// checkpoint would write that output twice, so the task fails, naming the
// file, and nothing more is committed.
func TestUnusableStateWithCommittedOutputFails(t *testing.T) {
	root := t.TempDir()
	st, err := checkpoint.NewFile(root)
	if err != nil {
		t.Fatal(err)
	}
	store := newTxnStore[update]()
	run := func(logs *logBuffer, after int64) error {
		obs := &drainAfter{after: after, drain: make(chan struct{})}
		cfg := engine.Config{
			Tasks: []int{0}, Storage: st, StateDir: t.TempDir(), Observer: obs, Drain: obs.drain,
			Retained: 100, RestartBackoff: time.Millisecond, MaxRestarts: 2,
			Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond},
		}
		if logs != nil {
			cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		}
		return engine.Run(t.Context(), countJob(t, 1<<40, 10, 1, nil, store.sink()), cfg)
	}
	if err := run(nil, 3); err != nil {
		t.Fatal(err)
	}
	committed := len(store.visible())
	// The drain's final checkpoint may have come right after another one,
	// with no output of its own: then walking back past it is right. Make
	// the newest checkpoint with a committed transaction the newest one.
	ids, _, err := checkpoint.ListCheckpoints(t.Context(), st, "count", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range slices.Backward(ids) {
		m, err := checkpoint.ReadManifest(t.Context(), st, "count", 0, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Operators) > 0 && slices.ContainsFunc(m.Operators, func(a checkpoint.Ack) bool { return len(a.Committables) > 0 }) {
			break
		}
		if err := os.Remove(filepath.Join(root, filepath.FromSlash(checkpoint.ManifestName("count", 0, id)))); err != nil {
			t.Fatal(err)
		}
	}
	newest, _, file := damageNewest(t, st, root, "corrupt")
	logs := &logBuffer{}
	err = run(logs, 1)
	if !errors.Is(err, engine.ErrNoValidCheckpoint) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "was committed") {
		t.Fatalf("want ErrNoValidCheckpoint naming %s and the committed transaction, got %v\n%s", file, err, logs)
	}
	if n := len(store.visible()); n != committed {
		t.Fatalf("%d records committed by the failed restore", n-committed)
	}
	t.Logf("checkpoint %d: %v", newest.Checkpoint, err)
}
