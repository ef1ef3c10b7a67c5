package checkpoint

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// step is one event fed to a coordinator at t0+at, and the actions it must
// return, written as show writes them.
type step struct {
	at   time.Duration
	do   string // tick, now, ack, decline, written, failed
	id   ID
	op   string // ack: the operator; decline, failed: the error text
	want []string
	// wake, if set, is the NextWake expected after the step: an offset from
	// t0 like "20s", or "none".
	wake string
}

func show(a Action) string {
	switch a := a.(type) {
	case Trigger:
		return fmt.Sprintf("trigger %d @%v", a.ID, a.Timestamp.Sub(t0))
	case WriteManifest:
		ops := make([]string, len(a.Acks))
		for i, ack := range a.Acks {
			ops[i] = ack.Operator
		}
		return fmt.Sprintf("write %d @%v [%s]", a.ID, a.Timestamp.Sub(t0), strings.Join(ops, " "))
	case NotifyComplete:
		return fmt.Sprintf("complete %d in %v", a.ID, a.Duration)
	case NotifyAborted:
		return fmt.Sprintf("aborted %d: %v", a.ID, a.Err)
	case Fail:
		return fmt.Sprintf("fail: %v", a.Err)
	}
	return fmt.Sprintf("unknown %T", a)
}

func run(t *testing.T, c *Coordinator, steps []step) {
	t.Helper()
	for i, s := range steps {
		now := t0.Add(s.at)
		var acts []Action
		switch s.do {
		case "tick":
			acts = c.Tick(now)
		case "now":
			acts = c.TriggerNow(now)
		case "first":
			acts = c.TriggerFirst(now)
		case "ack":
			acts = c.Ack(s.id, Ack{Operator: s.op}, now)
		case "decline":
			acts = c.Decline(s.id, errors.New(s.op), now)
		case "written":
			acts = c.ManifestWritten(s.id, now)
		case "failed":
			acts = c.ManifestFailed(s.id, errors.New(s.op), now)
		default:
			t.Fatalf("step %d: unknown op %q", i, s.do)
		}
		var got []string
		for _, a := range acts {
			got = append(got, show(a))
		}
		if !slices.Equal(got, s.want) {
			t.Fatalf("step %d (%s %d %s @%v):\n got %q\nwant %q", i, s.do, s.id, s.op, s.at, got, s.want)
		}
		if s.wake != "" {
			got := "none"
			if w, ok := c.NextWake(); ok {
				got = w.Sub(t0).String()
			}
			if got != s.wake {
				t.Fatalf("step %d: NextWake %s, want %s", i, got, s.wake)
			}
		}
	}
}

func TestCoordinator(t *testing.T) {
	ab := []string{"a", "b"}
	for _, tc := range []struct {
		name         string
		cfg          Config
		participants []string
		lastID       ID
		steps        []step
	}{
		{
			name: "trigger on interval", cfg: Config{Interval: 10 * time.Second}, participants: ab,
			steps: []step{
				{at: 0, do: "tick", wake: "10s"},
				{at: 9 * time.Second, do: "tick"},
				{at: 10 * time.Second, do: "tick", want: []string{"trigger 1 @10s"}, wake: "none"},
				{at: 11 * time.Second, do: "ack", id: 1, op: "a"},
				{at: 11 * time.Second, do: "ack", id: 1, op: "b", want: []string{"write 1 @10s [a b]"}},
				{at: 12 * time.Second, do: "written", id: 1, want: []string{"complete 1 in 2s"}, wake: "20s"},
				{at: 20 * time.Second, do: "tick", want: []string{"trigger 2 @20s"}},
			},
		},
		{
			// The task's checkpoint before its first record: the periodic
			// schedule (its phase) stays; only one, and not once a
			// periodic one came.
			name: "first checkpoint keeps the schedule", cfg: Config{Interval: 10 * time.Second}, participants: []string{"a"},
			steps: []step{
				{at: 3 * time.Second, do: "first", want: []string{"trigger 1 @3s"}},
				{at: 3 * time.Second, do: "first"},
				{at: 4 * time.Second, do: "ack", id: 1, op: "a", want: []string{"write 1 @3s [a]"}},
				{at: 4 * time.Second, do: "written", id: 1, want: []string{"complete 1 in 1s"}, wake: "10s"},
				{at: 5 * time.Second, do: "first"},
				{at: 10 * time.Second, do: "tick", want: []string{"trigger 2 @10s"}},
			},
		},
		{
			name: "ids grow from lastID", cfg: Config{Interval: time.Second, TolerableFailures: 1}, participants: ab, lastID: 41,
			steps: []step{
				{at: time.Second, do: "tick", want: []string{"trigger 42 @1s"}},
				{at: time.Second, do: "decline", id: 42, op: "x", want: []string{"aborted 42: checkpoint 42: declined: x"}},
				{at: 2 * time.Second, do: "tick", want: []string{"trigger 43 @2s"}},
			},
		},
		{
			name: "min pause after the end", cfg: Config{Interval: 10 * time.Second, MinPause: 8 * time.Second}, participants: []string{"a"},
			steps: []step{
				{at: 10 * time.Second, do: "tick", want: []string{"trigger 1 @10s"}},
				{at: 14 * time.Second, do: "ack", id: 1, op: "a", want: []string{"write 1 @10s [a]"}},
				{at: 15 * time.Second, do: "written", id: 1, want: []string{"complete 1 in 5s"}, wake: "23s"},
				{at: 20 * time.Second, do: "tick"},
				{at: 23 * time.Second, do: "tick", want: []string{"trigger 2 @23s"}},
			},
		},
		{
			name: "one in flight; a late checkpoint is followed at once", cfg: Config{Interval: 10 * time.Second}, participants: []string{"a"},
			steps: []step{
				{at: 10 * time.Second, do: "tick", want: []string{"trigger 1 @10s"}},
				{at: 20 * time.Second, do: "tick"},
				{at: 21 * time.Second, do: "now"},
				{at: 24 * time.Second, do: "ack", id: 1, op: "a", want: []string{"write 1 @10s [a]"}},
				{at: 25 * time.Second, do: "written", id: 1, want: []string{"complete 1 in 15s", "trigger 2 @25s"}},
				{at: 26 * time.Second, do: "ack", id: 2, op: "a", want: []string{"write 2 @25s [a]"}},
				{at: 26 * time.Second, do: "written", id: 2, want: []string{"complete 2 in 1s"}, wake: "35s"},
			},
		},
		{
			name: "timeout aborts and counts", cfg: Config{Interval: 10 * time.Second, Timeout: 5 * time.Second, TolerableFailures: 3}, participants: ab,
			steps: []step{
				{at: 10 * time.Second, do: "tick", want: []string{"trigger 1 @10s"}, wake: "15s"},
				{at: 11 * time.Second, do: "ack", id: 1, op: "a"},
				{at: 14 * time.Second, do: "tick"},
				{at: 15 * time.Second, do: "tick", want: []string{"aborted 1: checkpoint 1: timed out after 5s (acked by 1 of 2 participants; missing: b)"}, wake: "20s"},
				{at: 16 * time.Second, do: "ack", id: 1, op: "b"},
			},
		},
		{
			name: "no timeout while the manifest is written", cfg: Config{Interval: 10 * time.Second, Timeout: 5 * time.Second}, participants: []string{"a"},
			steps: []step{
				{at: 10 * time.Second, do: "tick", want: []string{"trigger 1 @10s"}},
				{at: 11 * time.Second, do: "ack", id: 1, op: "a", want: []string{"write 1 @10s [a]"}, wake: "none"},
				{at: 30 * time.Second, do: "tick"},
				{at: 31 * time.Second, do: "written", id: 1, want: []string{"complete 1 in 21s", "trigger 2 @31s"}},
			},
		},
		{
			name: "decline aborts", cfg: Config{TolerableFailures: 5}, participants: ab,
			steps: []step{
				{at: time.Second, do: "now", want: []string{"trigger 1 @1s"}},
				{at: 2 * time.Second, do: "ack", id: 1, op: "a"},
				{at: 3 * time.Second, do: "decline", id: 1, op: "b: disk full", want: []string{"aborted 1: checkpoint 1: declined: b: disk full"}},
				{at: 3 * time.Second, do: "ack", id: 1, op: "b"},
				{at: 3 * time.Second, do: "decline", id: 1, op: "again"},
			},
		},
		{
			name: "tolerable failures exceeded fails", cfg: Config{Interval: time.Second, TolerableFailures: 1}, participants: []string{"a"},
			steps: []step{
				{at: 1 * time.Second, do: "tick", want: []string{"trigger 1 @1s"}},
				{at: 1 * time.Second, do: "decline", id: 1, op: "boom", want: []string{"aborted 1: checkpoint 1: declined: boom"}},
				{at: 2 * time.Second, do: "tick", want: []string{"trigger 2 @2s"}},
				{at: 2 * time.Second, do: "ack", id: 2, op: "a", want: []string{"write 2 @2s [a]"}},
				{at: 2 * time.Second, do: "failed", id: 2, op: "disk full", want: []string{
					"aborted 2: checkpoint 2: write manifest: disk full",
					"fail: too many consecutive failed checkpoints: 2 in a row, 1 tolerated; last: checkpoint 2: write manifest: disk full",
				}, wake: "none"},
				{at: 3 * time.Second, do: "tick"},
				{at: 3 * time.Second, do: "now"},
			},
		},
		{
			name: "success resets the consecutive count", cfg: Config{Interval: time.Second, TolerableFailures: 1}, participants: []string{"a"},
			steps: []step{
				{at: 1 * time.Second, do: "tick", want: []string{"trigger 1 @1s"}},
				{at: 1 * time.Second, do: "decline", id: 1, op: "boom", want: []string{"aborted 1: checkpoint 1: declined: boom"}},
				{at: 2 * time.Second, do: "tick", want: []string{"trigger 2 @2s"}},
				{at: 2 * time.Second, do: "ack", id: 2, op: "a", want: []string{"write 2 @2s [a]"}},
				{at: 2 * time.Second, do: "written", id: 2, want: []string{"complete 2 in 0s"}},
				{at: 3 * time.Second, do: "tick", want: []string{"trigger 3 @3s"}},
				{at: 3 * time.Second, do: "decline", id: 3, op: "boom", want: []string{"aborted 3: checkpoint 3: declined: boom"}},
				{at: 4 * time.Second, do: "tick", want: []string{"trigger 4 @4s"}},
				{at: 4 * time.Second, do: "decline", id: 4, op: "boom", want: []string{
					"aborted 4: checkpoint 4: declined: boom",
					"fail: too many consecutive failed checkpoints: 2 in a row, 1 tolerated; last: checkpoint 4: declined: boom",
				}},
			},
		},
		{
			name: "trigger now without interval, min pause waived", cfg: Config{MinPause: time.Minute}, participants: []string{"a"},
			steps: []step{
				{at: time.Hour, do: "tick", wake: "none"},
				{at: time.Hour, do: "now", want: []string{"trigger 1 @1h0m0s"}},
				{at: time.Hour, do: "now"},
				{at: time.Hour, do: "now"},
				{at: time.Hour, do: "ack", id: 1, op: "a", want: []string{"write 1 @1h0m0s [a]"}},
				{at: time.Hour, do: "written", id: 1, want: []string{"complete 1 in 0s", "trigger 2 @1h0m0s"}},
				{at: time.Hour, do: "ack", id: 2, op: "a", want: []string{"write 2 @1h0m0s [a]"}},
				{at: time.Hour, do: "written", id: 2, want: []string{"complete 2 in 0s"}, wake: "none"},
				{at: time.Hour, do: "now", want: []string{"trigger 3 @1h0m0s"}},
			},
		},
		{
			name: "stale, unknown and duplicate events ignored", cfg: Config{Interval: time.Second}, participants: ab, lastID: 4,
			steps: []step{
				{at: time.Second, do: "tick", want: []string{"trigger 5 @1s"}},
				{at: time.Second, do: "ack", id: 4, op: "a"},
				{at: time.Second, do: "ack", id: 6, op: "a"},
				{at: time.Second, do: "ack", id: 5, op: "zombie"},
				{at: time.Second, do: "ack", id: 5, op: ""},
				{at: time.Second, do: "ack", id: 5, op: "a"},
				{at: time.Second, do: "ack", id: 5, op: "a"},
				{at: time.Second, do: "written", id: 5},
				{at: time.Second, do: "failed", id: 5, op: "not yet"},
				{at: time.Second, do: "decline", id: 4, op: "old"},
				{at: time.Second, do: "ack", id: 5, op: "b", want: []string{"write 5 @1s [a b]"}},
				{at: time.Second, do: "ack", id: 5, op: "b"},
				{at: time.Second, do: "decline", id: 5, op: "too late"},
				{at: time.Second, do: "written", id: 4},
				{at: 2 * time.Second, do: "written", id: 5, want: []string{"complete 5 in 1s", "trigger 6 @2s"}},
				{at: 2 * time.Second, do: "written", id: 5},
			},
		},
		{
			name: "acks sorted by operator", cfg: Config{Interval: time.Second}, participants: []string{"sink", "map", "source", "map"},
			steps: []step{
				{at: time.Second, do: "tick", want: []string{"trigger 1 @1s"}},
				{at: time.Second, do: "ack", id: 1, op: "source"},
				{at: time.Second, do: "ack", id: 1, op: "sink"},
				{at: time.Second, do: "ack", id: 1, op: "map", want: []string{"write 1 @1s [map sink source]"}},
			},
		},
		{
			name: "no participants", cfg: Config{}, participants: nil,
			steps: []step{
				{at: time.Second, do: "now", want: []string{"trigger 1 @1s", "write 1 @1s []"}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run(t, NewCoordinator(tc.cfg, tc.participants, tc.lastID, t0), tc.steps)
		})
	}
}

func TestCoordinatorErrorsAndStats(t *testing.T) {
	c := NewCoordinator(Config{Timeout: time.Second, TolerableFailures: 1}, []string{"a"}, 0, t0)
	c.TriggerNow(t0)
	if id, ok := c.InFlight(); !ok || id != 1 {
		t.Fatalf("InFlight = %d, %v; want 1, true", id, ok)
	}
	acts := c.Tick(t0.Add(time.Second))
	ab, ok := acts[0].(NotifyAborted)
	if !ok || !errors.Is(ab.Err, ErrTimeout) {
		t.Fatalf("timeout abort %v does not wrap ErrTimeout", acts)
	}
	c.TriggerNow(t0.Add(2 * time.Second))
	c.Ack(2, Ack{Operator: "a"}, t0.Add(3*time.Second))
	c.ManifestWritten(2, t0.Add(5*time.Second))
	c.TriggerNow(t0.Add(6 * time.Second))
	c.Decline(3, errors.New("x"), t0.Add(6*time.Second))
	c.TriggerNow(t0.Add(7 * time.Second))
	acts = c.Decline(4, errors.New("y"), t0.Add(7*time.Second))
	if f, ok := acts[len(acts)-1].(Fail); !ok || !errors.Is(f.Err, ErrTooManyFailures) {
		t.Fatalf("want Fail wrapping ErrTooManyFailures, got %v", acts)
	}
	got := c.Stats()
	got.LastFailure = nil
	want := Stats{Triggered: 4, Completed: 1, Failed: 3, ConsecutiveFailures: 2, LastCompleted: 2, LastDuration: 3 * time.Second}
	if got != want {
		t.Fatalf("Stats = %+v\nwant %+v", got, want)
	}
	if _, ok := c.InFlight(); ok {
		t.Fatal("InFlight after abort")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want []string // substrings; none: valid
	}{
		{cfg: Config{}},
		{cfg: Config{Interval: time.Second, Timeout: time.Minute, MinPause: time.Second, TolerableFailures: 3}},
		{cfg: Config{Interval: -1}, want: []string{"checkpoint.interval: must be >= 0"}},
		{cfg: Config{Timeout: -1, MinPause: -1, TolerableFailures: -1}, want: []string{
			"checkpoint.timeout: must be >= 0", "checkpoint.min-pause: must be >= 0", "checkpoint.tolerable-failures: must be >= 0",
		}},
	} {
		err := tc.cfg.Validate()
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%+v: %v", tc.cfg, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%+v: no error, want %q", tc.cfg, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q lacks %q", tc.cfg, err, w)
			}
		}
	}
}
