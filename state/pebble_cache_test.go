package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// TestPebbleValueCacheRows: value tables share one row a key (see keyRow).
// One table's cache filling up and going to Pebble must leave the other
// tables' cached (and unwritten) values of the same keys as they are, a row
// leaves the map only once no table caches its key, and a snapshot holds
// every table's writes.
func TestPebbleValueCacheRows(t *testing.T) {
	ctx := context.Background()
	st, err := checkpoint.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := openTestPebble(t, PebbleOptions{})
	a, b, big := mustValue(t, p, "a"), mustValue(t, p, "b"), mustValue(t, p, "big")
	get := func(v ValueTable, key []byte) string {
		t.Helper()
		got, ok, err := v.Get(key)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return "(none)"
		}
		return string(got)
	}
	const keys = 100
	for i := range keys {
		if err := a.Put(k(i), fmt.Appendf(nil, "a%d", i)); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := b.Put(k(i), fmt.Appendf(nil, "b%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(p.rows) != keys {
		t.Fatalf("%d rows for %d keys", len(p.rows), keys)
	}
	// big fills its cache twice over, on the same keys and more: it goes
	// to Pebble and empties, more than once.
	val := make([]byte, 200)
	n := 2 * valueCacheBytes / (len(val) + entryOverhead)
	for i := range n {
		copy(val, fmt.Sprintf("big-%d", i))
		if err := big.Put(k(i), val); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.values["big"].bytes; got >= valueCacheBytes {
		t.Fatalf("big's cache holds %d bytes, past its bound", got)
	}
	// wantAB checks a's and b's values of key i, as written above.
	wantAB := func(a, b ValueTable, i int, when string) {
		t.Helper()
		if got, want := get(a, k(i)), fmt.Sprintf("a%d", i); got != want {
			t.Fatalf("a's key %d is %q %s, want %q", i, got, when, want)
		}
		want := "(none)"
		if i%2 == 0 {
			want = fmt.Sprintf("b%d", i)
		}
		if got := get(b, k(i)); got != want {
			t.Fatalf("b's key %d is %q %s, want %q", i, got, when, want)
		}
	}
	for i := range keys {
		wantAB(a, b, i, "after big's cache emptied")
	}
	if d := p.values["a"].dirty; d != keys {
		t.Errorf("a has %d dirty entries after big went to Pebble, want %d: another table's spill wrote it out", d, keys)
	}
	// Rows: a's keys, plus those big still caches.
	want := keys
	for _, e := range p.values["big"].entries {
		if r := p.rows[e.key]; r == nil || len(r.more) < 2 || r.more[1] != e {
			t.Fatalf("big's entry of %q is not in its row", e.key)
		}
		if i, err := strconv.Atoi(strings.TrimPrefix(e.key, "key-")); err != nil || i >= keys {
			want++
		}
	}
	if len(p.rows) != want {
		t.Errorf("%d rows, want %d (a's %d keys and big's cached others)", len(p.rows), want, keys)
	}
	h := checkpointNow(t, p, st, 1)
	q := openTestPebble(t, PebbleOptions{})
	if err := q.Restore(ctx, st, h); err != nil {
		t.Fatal(err)
	}
	qa, qb, qbig := mustValue(t, q, "a"), mustValue(t, q, "b"), mustValue(t, q, "big")
	for _, i := range []int{0, 1, keys - 1} {
		wantAB(qa, qb, i, "restored")
	}
	for _, i := range []int{0, n / 2, n - 1} {
		clear(val)
		copy(val, fmt.Sprintf("big-%d", i))
		if got := get(qbig, k(i)); got != string(val) {
			t.Errorf("restored big's key %d: %q", i, got[:12])
		}
	}
	// Restore empties every cache, and so the rows.
	if err := p.Restore(ctx, st, h); err != nil {
		t.Fatal(err)
	}
	if len(p.rows) != 0 || p.lastRow != nil {
		t.Errorf("%d rows after a restore, want none", len(p.rows))
	}
}
