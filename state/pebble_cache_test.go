package state

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/checkpoint"
)

// TestPebbleValueCache: value tables write through their cache only at a
// snapshot or when it is full, yet every snapshot holds exactly the writes
// made before it, a restore forgets cached writes made after its
// checkpoint, and a full cache goes to Pebble without changing what Get
// returns.
func TestPebbleValueCache(t *testing.T) {
	ctx := context.Background()
	st, err := checkpoint.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := openTestPebble(t, PebbleOptions{})
	v := mustValue(t, p, "v")
	inDB := func(key []byte) (string, bool) {
		t.Helper()
		raw, closer, err := p.db.Get(p.tables["v"].key(key))
		if errors.Is(err, pebble.ErrNotFound) {
			return "", false
		}
		if err != nil {
			t.Fatal(err)
		}
		defer closer.Close()
		return string(raw), true
	}
	get := func(b Backend, key []byte) string {
		t.Helper()
		got, ok, err := mustValue(t, b, "v").Get(key)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return "(none)"
		}
		return string(got)
	}

	for i := range 10 {
		if err := v.Put(k(i), []byte("one")); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Delete(k(9)); err != nil {
		t.Fatal(err)
	}
	if _, ok := inDB(k(0)); ok {
		t.Fatal("a write reached Pebble before a snapshot: the cache writes through")
	}
	h1 := checkpointNow(t, p, st, 1)
	if got, ok := inDB(k(0)); !ok || got != "one" {
		t.Fatalf("after the snapshot Pebble has %q, %v for key 0", got, ok)
	}
	// After the snapshot: not in it.
	for i := range 10 {
		if err := v.Put(k(i), []byte("two")); err != nil {
			t.Fatal(err)
		}
	}
	q := openTestPebble(t, PebbleOptions{})
	if err := q.Restore(ctx, st, h1); err != nil {
		t.Fatal(err)
	}
	if got := get(q, k(3)); got != "one" {
		t.Errorf("checkpoint 1 restored: key 3 is %q, want one", got)
	}
	if got := get(q, k(9)); got != "(none)" {
		t.Errorf("checkpoint 1 restored: key 9 is %q, want deleted", got)
	}
	// Restoring forgets the cached writes after the checkpoint.
	if err := p.Restore(ctx, st, h1); err != nil {
		t.Fatal(err)
	}
	if got := get(p, k(3)); got != "one" {
		t.Errorf("restored in place: key 3 is %q, want one (the cache kept a write after the checkpoint)", got)
	}
	// Past its bound, the cache goes to Pebble, and reads stay right.
	val := make([]byte, 100)
	n := 2 * valueCacheBytes / (len(val) + entryOverhead)
	for i := range n {
		clear(val)
		copy(val, fmt.Sprintf("big-%d", i))
		if err := v.Put(k(1000+i), val); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := inDB(k(1000)); !ok {
		t.Errorf("%d entries of %d bytes written, none in Pebble: the cache is not bounded", n, len(val))
	}
	for _, i := range []int{0, n / 2, n - 1} {
		clear(val)
		copy(val, fmt.Sprintf("big-%d", i))
		if got := get(p, k(1000+i)); got != string(val) {
			t.Errorf("key %d: %q", 1000+i, got[:10])
		}
	}
}
