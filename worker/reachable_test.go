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
