package engine_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// holdStorage holds the write of one object until release is closed, and
// tells when it got there (held).
type holdStorage struct {
	checkpoint.Storage
	name    string
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *holdStorage) PutIfAbsent(ctx context.Context, name string, data []byte) error {
	if name == s.name {
		s.once.Do(func() { close(s.held) })
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Storage.PutIfAbsent(ctx, name, data)
}

// restores records the checkpoints tasks restored from.
type restores struct {
	engine.NopObserver
	mu    sync.Mutex
	from  []checkpoint.ID
	n     atomic.Int64
	after int64
	once  sync.Once
	drain chan struct{}
}

func (r *restores) TaskRestored(_ string, _ int, _ int64, from checkpoint.ID, _ time.Duration) {
	r.mu.Lock()
	r.from = append(r.from, from)
	r.mu.Unlock()
}

func (r *restores) CheckpointCompleted(string, int, checkpoint.Manifest) {
	if r.n.Add(1) == r.after {
		r.once.Do(func() { close(r.drain) })
	}
}

// commitSignal wraps a sink so that done closes once a Commit of checkpoint
// id or later returned.
type commitSignal struct {
	engine.SinkWriter[update]
	id   checkpoint.ID
	done chan struct{}
	once *sync.Once
}

func (c commitSignal) Commit(ctx context.Context, id checkpoint.ID) error {
	err := c.SinkWriter.Commit(ctx, id)
	if err == nil && id >= c.id {
		c.once.Do(func() { close(c.done) })
	}
	return err
}

// TestOlderOwnerCannotCommitAfterNewerClaim is the race between an older
// owner's commit and a newer owner's restore. Owner A (epoch 5) has
// pre-committed checkpoint 3 and is about to write its manifest when it
// pauses. Owner B (epoch 9) claims the task and lists the checkpoints: 2 is
// the newest. Then A resumes and writes manifest 3 before B's sinks fence
// it. If A committed checkpoint 3's transactions now, B, going on from 2,
// would commit that output a second time. A must see B's claim once its
// manifest is durable and stop without committing.
func TestOlderOwnerCannotCommitAfterNewerClaim(t *testing.T) {
	const keys = 10
	mem := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	st := &holdStorage{Storage: mem, name: checkpoint.ManifestName("count", 0, 3), held: make(chan struct{}), release: make(chan struct{})}
	store := newTxnStore[update]()

	// A: pauses its records too while its manifest write is held, so that
	// it does not run far ahead meanwhile.
	aCommitted := make(chan struct{})
	var aOnce sync.Once
	aSink := store.sinkWith(func(ctx context.Context, info engine.TaskInfo, restored []checkpoint.Committable) (engine.SinkWriter[update], error) {
		w, err := store.sink().Open(ctx, info, restored)
		if err != nil {
			return nil, err
		}
		return commitSignal{SinkWriter: w, id: 3, done: aCommitted, once: &aOnce}, nil
	})
	pauseA := func(int64) error {
		select {
		case <-st.held:
			<-st.release
		default:
		}
		return nil
	}
	var aErr error
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		aErr = engine.Run(t.Context(), countJob(t, 1<<40, keys, 1, pauseA, aSink), engine.Config{
			Tasks: []int{0}, Storage: st, StateDir: t.TempDir(), Epoch: 5, Retained: -1, RestartBackoff: time.Millisecond, Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond},
		})
	}()
	select {
	case <-st.held:
	case <-aDone:
		t.Fatalf("A ended before checkpoint 3: %v", aErr)
	}

	// B: once B has restored (from 2), its sink lets A's manifest land and
	// waits until A has gone (or, were A to commit, until it did), before it
	// fences A.
	var releaseOnce sync.Once
	bSink := store.sinkWith(func(ctx context.Context, info engine.TaskInfo, restored []checkpoint.Committable) (engine.SinkWriter[update], error) {
		releaseOnce.Do(func() { close(st.release) })
		select {
		case <-aDone:
		case <-aCommitted:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return store.sink().Open(ctx, info, restored)
	})
	obs := &restores{after: 3, drain: make(chan struct{})}
	err := engine.Run(t.Context(), countJob(t, 1<<40, keys, 1, nil, bSink), engine.Config{
		Tasks: []int{0}, Storage: st, StateDir: t.TempDir(), Epoch: 9, Retained: -1,
		// A checkpoint id A took already fails one checkpoint.
		Observer: obs, Drain: obs.drain, Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond, TolerableFailures: 3},
	})
	if err != nil {
		t.Fatalf("B: %v", err)
	}
	if !errors.Is(aErr, engine.ErrSuperseded) {
		t.Errorf("A: want ErrSuperseded, got %v", aErr)
	}
	select {
	case <-aCommitted:
		t.Error("A committed checkpoint 3 after B claimed the task")
	default:
	}
	if _, err := checkpoint.ReadManifest(t.Context(), mem, "count", 0, 3); err != nil {
		t.Errorf("A's manifest 3 is not there (the race did not happen): %v", err)
	}
	obs.mu.Lock()
	from := obs.from
	obs.mu.Unlock()
	if len(from) != 1 || from[0] != 2 {
		t.Errorf("B restored from %v, want checkpoint 2 once", from)
	}
	ids, _, err := checkpoint.ListCheckpoints(t.Context(), mem, "count", 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := checkpoint.ReadManifest(t.Context(), mem, "count", 0, ids[len(ids)-1])
	if err != nil {
		t.Fatal(err)
	}
	if m.Epoch != 9 {
		t.Fatalf("B's final checkpoint %d has epoch %d", m.Checkpoint, m.Epoch)
	}
	checkExactlyOnce(t, store.visible(), sourceOffset(t, m), keys, 1)
}

// epochObserver counts the checkpoints completed by each epoch's owner.
type epochObserver struct {
	engine.NopObserver
	mu   sync.Mutex
	by   map[int64]int
	cond chan struct{} // closed when want[epoch] is reached
	want int
	of   int64
	once sync.Once
}

func (o *epochObserver) CheckpointCompleted(_ string, _ int, m checkpoint.Manifest) {
	o.mu.Lock()
	o.by[m.Epoch]++
	n := o.by[m.Epoch]
	o.mu.Unlock()
	if m.Epoch == o.of && n >= o.want {
		o.once.Do(func() { close(o.cond) })
	}
}

// TestConcurrentOwners starts two owners of one task at the same moment, as
// a rebalance or two workers given the same tasks do, with Pebble state: no
// object may be written by both, the older one stops (superseded), and a
// third owner afterwards restores the newer one's history with the output
// exactly once.
func TestConcurrentOwners(t *testing.T) {
	const keys = 10
	root := t.TempDir()
	st, err := checkpoint.NewFile(root)
	if err != nil {
		t.Fatal(err)
	}
	store := newTxnStore[update]()
	pebble := func() state.Factory {
		return state.NewPebble(state.PebbleOptions{MemTableSize: 1 << 20, CacheSize: 1 << 20})
	}
	plan := countJob(t, 1<<40, keys, 1, nil, store.sink())
	obs := &epochObserver{by: map[int64]int{}, cond: make(chan struct{}), want: 3, of: 9}
	cfg := engine.Config{
		Storage: st, StateBackend: pebble(), Observer: obs, Retained: -1,
		// The owners fail each other's attempts while both run; on a
		// loaded machine enough failures in a row doubled the default
		// backoff past the test's minute (a CI run found it).
		RestartBackoff: time.Millisecond, MaxRestartBackoff: 50 * time.Millisecond,
		Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond},
	}
	exits := make(chan error, 2)
	var runners []*engine.Runner
	for _, epoch := range []int64{5, 9} {
		c := cfg
		c.StateDir = t.TempDir()
		r, err := engine.NewRunner(t.Context(), plan, c, func(_ int, err error) { exits <- err })
		if err != nil {
			t.Fatal(err)
		}
		runners = append(runners, r)
		if err := r.Start(0, epoch); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-obs.cond:
	case <-time.After(time.Minute):
		t.Fatal("the newer owner completed no checkpoints")
	}
	// The older owner ends by itself: fenced, it restarts, finds the newer
	// owner's claim and stops.
	select {
	case err := <-exits:
		if !errors.Is(err, engine.ErrSuperseded) {
			t.Fatalf("first owner to end: %v, want ErrSuperseded", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("neither owner stopped")
	}
	if got := runners[0].Running(); len(got) != 0 {
		t.Fatalf("the older owner still runs %v", got)
	}
	if res := runners[1].Stop(0, time.Minute); !res.Drained {
		t.Fatalf("the newer owner did not drain: %+v", res)
	}

	// Every file a manifest references is either shared or in the folder of
	// the manifest's own owner.
	ids, _, err := checkpoint.ListCheckpoints(t.Context(), st, "count", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		m, err := checkpoint.ReadManifest(t.Context(), st, "count", 0, id)
		if err != nil {
			t.Fatal(err)
		}
		own := checkpoint.CheckpointDir("count", 0, id) + "e" + strconv.FormatInt(m.Epoch, 10) + "-"
		for _, a := range m.Operators {
			if a.State == nil {
				continue
			}
			for _, f := range a.State.Files {
				if !f.Shared && !strings.HasPrefix(f.Name, own) {
					t.Errorf("checkpoint %d (epoch %d) references %s, outside its owner's folder %s", id, m.Epoch, f.Name, own)
				}
			}
		}
	}

	// A third owner takes over from the newer one's final checkpoint.
	third := &restores{after: 2, drain: make(chan struct{})}
	c := cfg
	c.Tasks, c.Epoch, c.StateDir, c.Observer, c.Drain = []int{0}, 12, t.TempDir(), third, third.drain
	if err := engine.Run(t.Context(), plan, c); err != nil {
		t.Fatal(err)
	}
	ids, _, err = checkpoint.ListCheckpoints(t.Context(), st, "count", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(third.from) != 1 {
		t.Fatalf("third owner restored %v", third.from)
	}
	restored, err := checkpoint.ReadManifest(t.Context(), st, "count", 0, third.from[0])
	if err != nil || restored.Epoch != 9 {
		t.Fatalf("third owner restored checkpoint %d of epoch %d (%v), want the newer owner's (9)", third.from[0], restored.Epoch, err)
	}
	m, err := checkpoint.ReadManifest(t.Context(), st, "count", 0, ids[len(ids)-1])
	if err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, store.visible(), sourceOffset(t, m), keys, 1)
}

// TestOlderOwnerStopsBeforeItsSinksOpen: an owner whose task was claimed
// by a newer owner while it restored stops before its sinks open, which
// would fence the newer owner's transactions.
func TestOlderOwnerStopsBeforeItsSinksOpen(t *testing.T) {
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	claimed := make(chan struct{})
	src := func(ctx context.Context, info engine.TaskInfo, restored []checkpoint.SourcePosition) (engine.SourceReader[int64], error) {
		// The restore of this owner takes long: a newer owner claims the
		// task meanwhile.
		if err := checkpoint.Claim(ctx, st, "slow", 0, 9); err != nil {
			return nil, err
		}
		close(claimed)
		return stream.GeneratorSource(10, func(_ int, i int64) int64 { return i })(ctx, info, restored)
	}
	var opened atomic.Bool
	sink := func(context.Context, engine.TaskInfo, []checkpoint.Committable) (engine.SinkWriter[int64], error) {
		opened.Store(true)
		return nil, errors.New("the sink must not open")
	}
	job := stream.NewJob("slow")
	stream.Sink(stream.Source(job, "numbers", src), "out", engine.SinkFactory[int64](sink))
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	err = engine.Run(t.Context(), plan, engine.Config{Tasks: []int{0}, Storage: st, StateDir: t.TempDir(), Epoch: 5})
	<-claimed
	if !errors.Is(err, engine.ErrSuperseded) {
		t.Fatalf("want ErrSuperseded, got %v", err)
	}
	if opened.Load() {
		t.Fatal("the older owner opened its sinks after the newer one claimed the task")
	}
}

// zombieOpens lets a zombie owner open the task's sink once, right before
// the first commit of a checkpoint with a transaction: as a paused older
// owner that comes back and initialises the transactional ids, it aborts
// the prepared transaction and fences this owner's writer.
type zombieOpens struct {
	engine.SinkWriter[update]
	store *txnStore[update]
	info  engine.TaskInfo
	done  *atomic.Bool
}

func (z zombieOpens) Commit(ctx context.Context, id checkpoint.ID) error {
	if z.store.pendingOf(z.info.Task) > 0 && z.done.CompareAndSwap(false, true) {
		if _, err := z.store.sink().Open(ctx, z.info, nil); err != nil {
			return err
		}
	}
	return z.SinkWriter.Commit(ctx, id)
}

// reinitAfter re-initialises the task's transactional ids once, right
// after the first commit of a checkpoint with a transaction.
type reinitAfter struct {
	engine.SinkWriter[update]
	store *txnStore[update]
	task  int
	done  *atomic.Bool
}

func (r reinitAfter) Commit(ctx context.Context, id checkpoint.ID) error {
	had := r.store.pendingOf(r.task) > 0
	if err := r.SinkWriter.Commit(ctx, id); err != nil {
		return err
	}
	if had && r.done.CompareAndSwap(false, true) {
		r.store.reinit(r.task)
	}
	return nil
}

// fencedRun runs the count job on task 0 until 8 checkpoints completed,
// its sink's writers wrapped by wrap (which sets done once it fenced),
// and checks that the output is exactly once. It returns the storage and
// the checkpoints the task's attempts restored.
func fencedRun(t *testing.T, wrap func(engine.SinkWriter[update], *txnStore[update], engine.TaskInfo, *atomic.Bool) engine.SinkWriter[update]) (checkpoint.Storage, []checkpoint.ID) {
	t.Helper()
	const keys = 10
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	store := newTxnStore[update]()
	var fenced atomic.Bool
	sink := store.sinkWith(func(ctx context.Context, info engine.TaskInfo, restored []checkpoint.Committable) (engine.SinkWriter[update], error) {
		w, err := store.sink().Open(ctx, info, restored)
		if err != nil {
			return nil, err
		}
		return wrap(w, store, info, &fenced), nil
	})
	obs := &restores{after: 8, drain: make(chan struct{})}
	err := engine.Run(t.Context(), countJob(t, 1<<40, keys, 1, nil, sink), engine.Config{
		Tasks: []int{0}, Storage: st, StateDir: t.TempDir(), Epoch: 9, Retained: -1, RestartBackoff: time.Millisecond,
		Observer: obs, Drain: obs.drain, Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond},
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !fenced.Load() {
		t.Fatal("the writer was never fenced: the test did not test")
	}
	ids, _, err := checkpoint.ListCheckpoints(t.Context(), st, "count", 0)
	if err != nil {
		t.Fatal(err)
	}
	last, err := checkpoint.ReadManifest(t.Context(), st, "count", 0, ids[len(ids)-1])
	if err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, store.visible(), sourceOffset(t, last), keys, 1)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	return st, obs.from
}

// TestZombieFencesFirstTransaction: an older owner that opens its sinks a
// moment after the newer one claimed (it checked the claims before, then
// paused) aborts the newer owner's first prepared transaction, whose
// checkpoint is durable. The task restarts and walks back past that
// checkpoint, which is only possible to a checkpoint before it: a fresh
// task takes one before it reads a record, at its start positions and with
// no transaction. Without it the task had no valid checkpoint and stopped
// for good (found by processor chaos: a worker paused while it restored).
func TestZombieFencesFirstTransaction(t *testing.T) {
	st, from := fencedRun(t, func(w engine.SinkWriter[update], store *txnStore[update], info engine.TaskInfo, done *atomic.Bool) engine.SinkWriter[update] {
		return zombieOpens{SinkWriter: w, store: store, info: info, done: done}
	})
	first, err := checkpoint.ReadManifest(t.Context(), st, "count", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if off := sourceOffset(t, first); off != 0 {
		t.Errorf("checkpoint 1 is at offset %d, want 0: taken before the first record", off)
	}
	for _, a := range first.Operators {
		if len(a.Committables) > 0 {
			t.Errorf("checkpoint 1 has transactions of %s: %v", a.Operator, a.Committables)
		}
	}
	if len(from) != 2 || from[0] != 0 || from[1] != 1 {
		t.Errorf("attempts restored %v, want none, then checkpoint 1", from)
	}
}

// TestCommittedThenFencedIsRecorded: a task commits a checkpoint's
// transaction, and before its next manifest records that, another owner
// re-initialises the transactional ids, fencing it. Kafka (KIP-890) then
// no longer tells that commit from an abort: the restart must not walk
// back past the checkpoint and write its output again. The failed run
// records what it committed, and the restart restores that checkpoint.
func TestCommittedThenFencedIsRecorded(t *testing.T) {
	_, from := fencedRun(t, func(w engine.SinkWriter[update], store *txnStore[update], info engine.TaskInfo, done *atomic.Bool) engine.SinkWriter[update] {
		return reinitAfter{SinkWriter: w, store: store, task: info.Task, done: done}
	})
	if len(from) != 2 || from[1] < 2 {
		t.Errorf("attempts restored %v, want none, then the checkpoint whose transaction committed", from)
	}
}
