package diskfault

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestControlFile: the control file's content, trimmed and in any case,
// names the fault; an unknown content or no file means none.
func TestControlFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "faults")
	f := New(file, nil)
	create := errorfs.Op{Kind: errorfs.OpCreate, Path: "x"}
	read := errorfs.Op{Kind: errorfs.OpFileRead, Path: "x"}
	remove := errorfs.Op{Kind: errorfs.OpRemove, Path: "x"}
	for _, tc := range []struct {
		content            string // "-": no file
		mode               string
		create, read, remv error
	}{
		{"-", "none", nil, nil, nil},
		{"", "none", nil, nil, nil},
		{" ENOSPC\n", ENOSPC, syscall.ENOSPC, nil, nil},
		{"eio", EIO, syscall.EIO, syscall.EIO, nil},
		{"full", "none", nil, nil, nil},
	} {
		if tc.content == "-" {
			os.Remove(file)
		} else if err := os.WriteFile(file, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := f.Reload(); got != tc.mode {
			t.Errorf("%q: fault %q, want %q", tc.content, got, tc.mode)
		}
		for _, c := range []struct {
			op   errorfs.Op
			want error
		}{{create, tc.create}, {read, tc.read}, {remove, tc.remv}} {
			err := f.MaybeError(c.op)
			if (c.want == nil) != (err == nil) || c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("%q: %v of %s: %v, want %v", tc.content, opName(c.op.Kind), c.op.Path, err, c.want)
			}
		}
	}
}

// TestWrap: a wrapped filesystem fails creates while the disk is full,
// and removes and creates again once it is not.
func TestWrap(t *testing.T) {
	dir := t.TempDir()
	control := filepath.Join(dir, "faults")
	f := New(control, nil)
	fs := f.Wrap(vfs.Default)
	path := filepath.Join(dir, "data")
	set := func(mode string) {
		t.Helper()
		if err := os.WriteFile(control, []byte(mode), 0o644); err != nil {
			t.Fatal(err)
		}
		f.Reload()
	}
	file, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	file.Close()
	set(ENOSPC)
	if _, err := fs.Create(path+"2", vfs.WriteCategoryUnspecified); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("create on a full disk: %v, want ENOSPC", err)
	}
	if err := fs.Remove(path); err != nil {
		t.Fatalf("remove on a full disk: %v, want it to work", err)
	}
	set(None)
	if file, err = fs.Create(path, vfs.WriteCategoryUnspecified); err != nil {
		t.Fatalf("create once the disk has room: %v", err)
	}
	file.Close()
}
