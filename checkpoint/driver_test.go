package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeTask is an Executor whose operators ack from within the trigger, as a
// task whose barriers pass at once would, unless told to misbehave.
type fakeTask struct {
	d         *Driver
	operators []string
	// refuse makes TriggerCheckpoint fail; silent makes operators not ack.
	refuse, silent bool

	mu  sync.Mutex
	log []string
}

func (f *fakeTask) record(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, fmt.Sprintf(format, args...))
}

func (f *fakeTask) events() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

func (f *fakeTask) TriggerCheckpoint(id ID, ts time.Time) error {
	f.record("trigger %d", id)
	if f.refuse {
		return errors.New("sources stopped")
	}
	if !f.silent {
		for _, op := range slices.Backward(f.operators) {
			f.d.Ack(id, Ack{Operator: op, Sources: []SourcePosition{{Source: op, Offset: int64(id) * 100}}})
		}
	}
	return nil
}

func (f *fakeTask) NotifyComplete(id ID)           { f.record("complete %d", id) }
func (f *fakeTask) NotifyAborted(id ID, err error) { f.record("aborted %d: %v", id, err) }

type driverSetup struct {
	cfg    Config
	lastID ID
	task   fakeTask
}

func startDriver(t *testing.T, s *driverSetup, st Storage) (d *Driver, manifests *[]Manifest, wait func() error, cancel context.CancelFunc) {
	t.Helper()
	var mu sync.Mutex
	manifests = new([]Manifest)
	d = NewDriver(DriverConfig{
		Coordinator: NewCoordinator(s.cfg, s.task.operators, s.lastID, time.Now()),
		Storage:     st,
		Job:         "orders",
		Task:        2,
		Epoch:       5,
		Executor:    &s.task,
		OnComplete: func(m Manifest) {
			mu.Lock()
			*manifests = append(*manifests, m)
			mu.Unlock()
		},
	})
	s.task.d = d
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	return d, manifests, func() error { return <-done }, cancel
}

func TestDriverPeriodicCheckpoints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := NewMemory(MemoryOptions{})
		s := &driverSetup{cfg: Config{Interval: 10 * time.Second}, lastID: 4, task: fakeTask{operators: []string{"sink", "source"}}}
		start := time.Now()
		d, manifests, wait, cancel := startDriver(t, s, st)

		time.Sleep(35 * time.Second) // advances the bubble's clock
		synctest.Wait()
		want := []string{"trigger 5", "complete 5", "trigger 6", "complete 6", "trigger 7", "complete 7"}
		if got := s.task.events(); !reflect.DeepEqual(got, want) {
			t.Fatalf("events %q\nwant %q", got, want)
		}
		completed, highest, err := ListCheckpoints(t.Context(), st, "orders", 2)
		if err != nil || !reflect.DeepEqual(completed, []ID{5, 6, 7}) || highest != 7 {
			t.Fatalf("ListCheckpoints = %v, %d, %v", completed, highest, err)
		}
		m, err := ReadManifest(t.Context(), st, "orders", 2, 6)
		if err != nil {
			t.Fatal(err)
		}
		wantM := Manifest{
			Version: FormatVersion, Job: "orders", Task: 2, Checkpoint: 6, Epoch: 5,
			Timestamp: start.Add(20 * time.Second),
			Operators: []Ack{
				{Operator: "sink", Sources: []SourcePosition{{Source: "sink", Offset: 600}}},
				{Operator: "source", Sources: []SourcePosition{{Source: "source", Offset: 600}}},
			},
		}
		if !m.Timestamp.Equal(wantM.Timestamp) {
			t.Fatalf("timestamp %v, want %v", m.Timestamp, wantM.Timestamp)
		}
		m.Timestamp = wantM.Timestamp
		if !reflect.DeepEqual(m, wantM) {
			t.Fatalf("manifest %+v\nwant %+v", m, wantM)
		}
		if len(*manifests) != 3 || (*manifests)[1].Checkpoint != 6 {
			t.Fatalf("OnComplete saw %+v", *manifests)
		}
		if s := d.Stats(); s.Completed != 3 || s.LastCompleted != 7 || s.InFlight != 0 {
			t.Fatalf("Stats = %+v", s)
		}

		cancel()
		if err := wait(); err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	})
}

func TestDriverFailsAfterTolerableFailures(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ops     []string
		refuse  bool // TriggerCheckpoint fails
		silent  bool // operators never ack
		cfg     Config
		after   time.Duration // when Run must have returned
		aborted []string
		want    string
	}{
		{
			name: "trigger errors", ops: []string{"a"}, refuse: true,
			cfg: Config{Interval: time.Second, TolerableFailures: 2}, after: 3 * time.Second,
			aborted: []string{
				"aborted 1: checkpoint 1: declined: trigger: sources stopped",
				"aborted 2: checkpoint 2: declined: trigger: sources stopped",
				"aborted 3: checkpoint 3: declined: trigger: sources stopped",
			},
			want: "too many consecutive failed checkpoints: 3 in a row, 2 tolerated; last: checkpoint 3: declined: trigger: sources stopped",
		},
		{
			name: "timeouts", ops: []string{"a", "b"}, silent: true,
			cfg: Config{Interval: time.Second, Timeout: 5 * time.Second, MinPause: time.Second}, after: 6 * time.Second,
			aborted: []string{"aborted 1: checkpoint 1: timed out after 5s (acked by 0 of 2 participants; missing: a, b)"},
			want:    "too many consecutive failed checkpoints: 1 in a row, 0 tolerated",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &driverSetup{cfg: tc.cfg, task: fakeTask{operators: tc.ops, refuse: tc.refuse, silent: tc.silent}}
				_, _, wait, cancel := startDriver(t, s, NewMemory(MemoryOptions{}))
				defer cancel()
				time.Sleep(tc.after)
				synctest.Wait()
				var aborted []string
				for _, e := range s.task.events() {
					if strings.HasPrefix(e, "aborted") {
						aborted = append(aborted, e)
					}
				}
				if !reflect.DeepEqual(aborted, tc.aborted) {
					t.Fatalf("aborted %q\nwant %q", aborted, tc.aborted)
				}
				select {
				case err := <-waitChan(wait):
					if !errors.Is(err, ErrTooManyFailures) || !strings.Contains(err.Error(), tc.want) {
						t.Fatalf("Run = %v, want %q", err, tc.want)
					}
				default:
					t.Fatal("Run still running")
				}
			})
		})
	}
}

// waitChan runs wait and delivers its result; inside a bubble, after
// synctest.Wait, a returned Run has its result ready at once.
func waitChan(wait func() error) <-chan error {
	c := make(chan error, 1)
	go func() { c <- wait() }()
	synctest.Wait()
	return c
}

func TestDriverTriggerNowAndManifestConflict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := NewMemory(MemoryOptions{})
		// A newer owner already wrote checkpoint 8's manifest.
		if err := st.PutIfAbsent(t.Context(), ManifestName("orders", 2, 8), []byte("newer owner")); err != nil {
			t.Fatal(err)
		}
		s := &driverSetup{cfg: Config{TolerableFailures: 1}, lastID: 7, task: fakeTask{operators: []string{"a"}}}
		d, manifests, wait, cancel := startDriver(t, s, st)
		defer cancel()

		time.Sleep(time.Hour) // no interval: nothing happens by itself
		synctest.Wait()
		if got := s.task.events(); len(got) != 0 {
			t.Fatalf("events without interval: %q", got)
		}
		d.TriggerNow()
		synctest.Wait()
		// The id is taken: this owner is a zombie and stops, whatever the
		// tolerable failures.
		select {
		case err := <-waitChan(wait):
			if !errors.Is(err, ErrSuperseded) {
				t.Fatalf("Run: %v, want ErrSuperseded", err)
			}
		default:
			t.Fatal("Run still running after its manifest id was taken")
		}
		if got, want := s.task.events(), []string{"trigger 8"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("events %q\nwant %q", got, want)
		}
		if len(*manifests) != 0 {
			t.Fatalf("OnComplete saw %+v", *manifests)
		}
	})
}

// An id taken by an older owner (a zombie's manifest) is only a failed
// checkpoint: this owner goes on with the next id.
func TestDriverManifestConflictWithOlderOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := NewMemory(MemoryOptions{})
		b, err := EncodeManifest(Manifest{Version: FormatVersion, Job: "orders", Task: 2, Checkpoint: 8, Epoch: 4})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.PutIfAbsent(t.Context(), ManifestName("orders", 2, 8), b); err != nil {
			t.Fatal(err)
		}
		s := &driverSetup{cfg: Config{TolerableFailures: 1}, lastID: 7, task: fakeTask{operators: []string{"a"}}}
		d, manifests, _, cancel := startDriver(t, s, st)
		defer cancel()
		d.TriggerNow()
		synctest.Wait()
		d.TriggerNow()
		synctest.Wait()
		want := []string{
			"trigger 8",
			"aborted 8: checkpoint 8: write manifest: put orders/tasks/2/chk-00000000000000000008/manifest.json: checkpoint: object exists",
			"trigger 9",
			"complete 9",
		}
		if got := s.task.events(); !reflect.DeepEqual(got, want) {
			t.Fatalf("events %q\nwant %q", got, want)
		}
		if len(*manifests) != 1 || (*manifests)[0].Checkpoint != 9 {
			t.Fatalf("OnComplete saw %+v", *manifests)
		}
	})
}
