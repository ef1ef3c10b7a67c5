package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/internal/diskfault"
)

// One probe answers every task that asks within an interval.
func TestReachabilityProbesOncePerInterval(t *testing.T) {
	calls := 0
	fail := true
	r := &reachability{every: time.Hour, probe: func(context.Context) error {
		calls++
		if fail {
			return errors.New("no answer")
		}
		return nil
	}}
	for range 64 {
		if err := r.check(t.Context()); err == nil {
			t.Fatal("a failed probe's answer was lost")
		}
	}
	if calls != 1 {
		t.Fatalf("%d probes for 64 checks within an interval, want 1", calls)
	}
	r.every, fail = 0, false
	if err := r.check(t.Context()); err != nil || calls != 2 {
		t.Fatalf("after the interval: %v after %d probes, want a new probe that answered", err, calls)
	}
}

// The disk probe fails while the state directory's disk is full or
// failing, and answers once it is not.
func TestProbeDiskSeesAFullDisk(t *testing.T) {
	dir := t.TempDir()
	control := filepath.Join(t.TempDir(), "faults")
	inj := diskfault.New(control, nil)
	fsys := inj.Wrap(vfs.Default)
	set := func(mode string) {
		t.Helper()
		if err := os.WriteFile(control, []byte(mode), 0o644); err != nil {
			t.Fatal(err)
		}
		inj.Reload()
	}
	if err := probeDisk(fsys, dir); err != nil {
		t.Fatalf("healthy disk: %v", err)
	}
	set(diskfault.ENOSPC)
	if err := probeDisk(fsys, dir); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("full disk: %v, want ENOSPC", err)
	}
	set(diskfault.None)
	if err := probeDisk(fsys, dir); err != nil {
		t.Fatalf("disk with room again: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("the probe left %v behind", left)
	}
}

// A dependency that answers, but ten times slower than usual twice in a
// row, counts as not answering; one slow answer, or answers slower only
// within the floor, do not.
func TestSlownessCountsASlowDependencyAsDown(t *testing.T) {
	var s slowness
	ms := time.Millisecond
	for _, took := range []time.Duration{2 * ms, 1 * ms, 2 * ms, 100 * ms, 2 * ms} {
		if err := s.judge(took); err != nil {
			t.Fatalf("%v against a usual of about 2 ms: %v (under the %v floor)", took, err, slowFloor)
		}
	}
	if err := s.judge(400 * ms); err != nil {
		t.Fatalf("one slow answer: %v", err)
	}
	if err := s.judge(2 * ms); err != nil {
		t.Fatalf("fast again: %v", err)
	}
	usual := s.usual
	if err := s.judge(400 * ms); err != nil {
		t.Fatalf("a slow answer after a fast one: %v", err)
	}
	if err := s.judge(400 * ms); err == nil {
		t.Fatal("two slow answers in a row did not count as down")
	}
	if err := s.judge(450 * ms); err == nil {
		t.Fatal("a third slow answer did not count as down")
	}
	if s.usual != usual {
		t.Fatalf("slow answers moved the usual from %v to %v", usual, s.usual)
	}
	if err := s.judge(2 * ms); err != nil {
		t.Fatalf("fast again after the fault: %v", err)
	}
	// A store that is slow all along is judged against its own usual.
	var slow slowness
	for range 5 {
		if err := slow.judge(300 * ms); err != nil {
			t.Fatalf("a dependency always at 300 ms: %v", err)
		}
	}
}
