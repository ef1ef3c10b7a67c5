package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/fuzzseed"
)

// Fuzz targets for what this package reads back from checkpoint storage
// and local disk: memory snapshot files (this file), Pebble's catalog,
// map keys and restored list (pebble_fuzz_test.go), and the codecs
// (codec_fuzz_test.go). Their seeds run with plain go test; to search,
// run one target at a time:
//
//	go test -run '^$' -fuzz '^FuzzDecodeTable$' -fuzztime 5m -parallel 1 ./state

// fuzzSeed is one seed of a fuzz target (internal/fuzzseed).
type fuzzSeed = fuzzseed.Seed

// memoryFiles returns the files a memory backend uploads for one value,
// one list and one map table with awkward keys and values.
func memoryFiles(tb testing.TB) map[string][]byte {
	tb.Helper()
	b := OpenMemory(MemoryOptions{})
	v, l, m := mustValue(tb, b, "counts"), mustList(tb, b, "events"), mustMap(tb, b, "seen")
	long := strings.Repeat("x", 300) // lengths past one varint byte
	for i, k := range []string{"", "\x00", "a", "\xff\xff", long} {
		v.Put([]byte(k), []byte(fmt.Sprint(i)))
		l.Append([]byte(k), []byte(k))
		l.Append([]byte(k), nil)
		m.Put([]byte(k), []byte("u"), []byte(k))
		m.Put([]byte(k), nil, []byte(long))
	}
	s, err := b.Snapshot(1)
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Release()
	st := newFakeStorage()
	h, err := s.Upload(context.Background(), st, "job/tasks/0/chk-1/op/", "shared/")
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string][]byte{}
	for _, f := range h.Files {
		out[f.Local] = st.objs[f.Name]
	}
	return out
}

// version1File lays out a file as format version 1 wrote it (each record
// a key length, the key, a record length, the record): the encoder is
// gone, its files are still read.
func version1File(kind tableKind, name string, recs ...string) []byte {
	part := func(b []byte, s string) []byte { return appendRecordPart(b, []byte(s)) }
	b := append([]byte(fileMagic), 1, byte(kind))
	b = part(b, name)
	b = binary.AppendUvarint(b, uint64(len(recs)/2))
	for i := 0; i+1 < len(recs); i += 2 {
		b = part(part(b, recs[i]), recs[i+1])
	}
	return b
}

// fileStateName is the state name a file's header gives, when it is one
// a backend could have declared; else "t". Restore takes a file's state
// name from its reference, which a good file agrees with.
func fileStateName(data []byte) string {
	if len(data) < len(fileMagic)+2 {
		return "t"
	}
	d := &decoder{b: data[len(fileMagic)+2:]}
	name := string(d.bytes())
	if d.err != nil || validName(name) != nil {
		return "t"
	}
	return name
}

// FuzzDecodeTable: no file makes decoding a memory snapshot file panic; a
// file it refuses fails Restore with an error naming the object; and a
// table it accepts is uploaded again as a file that restores to the same
// state, and whose records, in key order, are the same on a second round.
func FuzzDecodeTable(f *testing.F) {
	files := memoryFiles(f)
	counts, events, seen := files["counts"], files["events"], files["seen"]
	nested := string(appendRecordPart(appendRecordPart([]byte{1}, []byte("u")), []byte("v")))
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "value", Args: []any{counts}},
		{Name: "list", Args: []any{events}},
		{Name: "map", Args: []any{seen}},
		{Name: "v1-value", Args: []any{version1File(kindValue, "v", "a", "1", "bb", strings.Repeat("y", 200))}},
		{Name: "v1-map", Args: []any{version1File(kindMap, "m", "k", nested)}},
		{Name: "v1-duplicate-keys", Args: []any{version1File(kindValue, "v", "a", "1", "a", "2")}},
		{Name: "bad-magic", Args: []any{append([]byte("WEIRMEN"), counts[7:]...)}},
		{Name: "future-version", Args: []any{append(append([]byte(fileMagic), 3), counts[8:]...)}},
		{Name: "unknown-kind", Args: []any{append(append([]byte(fileMagic), formatVersion, 4), counts[9:]...)}},
		{Name: "truncated", Args: []any{seen[:len(seen)-1]}},
		{Name: "trailing-byte", Args: []any{append(bytes.Clone(events), 0)}},
		{Name: "count-past-end", Args: []any{[]byte("WEIRMEM\x02\x01\x01t\x05")}},
		{Name: "map-out-of-order", Args: []any{version1File(kindMap, "m", "k", "\x02\x01b\x00\x01a\x00")}},
		{Name: "bad-list-item", Args: []any{version1File(kindList, "l", "k", "\x05ab")}},
		{Name: "huge-varint", Args: []any{[]byte("WEIRMEM\x02\x01\x01t\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")}},
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		name := fileStateName(data)
		tab, decodeErr := OpenMemory(MemoryOptions{}).decodeTable(name, data)

		st := newFakeStorage()
		obj := "job/tasks/0/chk-1/e1-a/op/" + name
		ref, err := checkpoint.PutFile(ctx, st, obj, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		ref.Local = name
		b := OpenMemory(MemoryOptions{})
		err = b.Restore(ctx, st, checkpoint.StateHandle{Backend: "memory", Files: []checkpoint.FileRef{ref}})
		if decodeErr != nil {
			if err == nil || !strings.Contains(err.Error(), obj) && !strings.Contains(err.Error(), strconv.Quote(obj)) {
				t.Fatalf("restore of a file that does not decode (%v) = %v, want an error naming %s", decodeErr, err, obj)
			}
			return
		}
		if err != nil {
			t.Fatalf("the file decodes, its restore fails: %v", err)
		}
		if want := tableKind(data[len(fileMagic)+1]); tab.kind() != want {
			t.Fatalf("decoded a %s table from a %s file", tab.kind(), want)
		}

		want := memoryContent(t, b)
		enc1, b1 := uploadAndRestore(t, b, 2)
		if got := memoryContent(t, b1); !slices.Equal(got, want) {
			t.Fatalf("upload and restore changed the state:\n got %q\nwant %q", got, want)
		}
		enc2, b2 := uploadAndRestore(t, b1, 3)
		if got := memoryContent(t, b2); !slices.Equal(got, want) {
			t.Fatalf("a second upload and restore changed the state:\n got %q\nwant %q", got, want)
		}
		// Record order follows a per-table hash seed; the records are the
		// same.
		if r1, r2 := sortedRecords(t, enc1), sortedRecords(t, enc2); !slices.Equal(r1, r2) {
			t.Fatalf("a second upload wrote other records:\n%q\n%q", r1, r2)
		}
	})
}

// memoryContent lists what b's tables hold, read through their interfaces,
// sorted. (The model's dump orders map entries by key + NUL + user key,
// which keys with NUL bytes, as fuzzed ones have, do not follow.)
func memoryContent(t *testing.T, b *Memory) []string {
	t.Helper()
	var out []string
	for name, tab := range b.tables {
		switch tab := tab.(type) {
		case *memValue:
			out = append(out, fmt.Sprintf("value %q", name))
			tab.m.each(func(k, v []byte) error {
				got, ok, err := tab.Get(k)
				if err != nil || !ok || !bytes.Equal(got, v) {
					t.Fatalf("%s: Get(%q) = %q, %v, %v; the walk has %q", name, k, got, ok, err, v)
				}
				out = append(out, fmt.Sprintf("%q %q=%q", name, k, v))
				return nil
			})
		case *memList:
			out = append(out, fmt.Sprintf("list %q", name))
			tab.m.each(func(k, _ []byte) error {
				var items []string
				if err := tab.Iterate(k, func(v []byte) error { items = append(items, string(v)); return nil }); err != nil {
					t.Fatalf("%s: Iterate(%q): %v", name, k, err)
				}
				out = append(out, fmt.Sprintf("%q %q=%q", name, k, items))
				return nil
			})
		case *memMap:
			out = append(out, fmt.Sprintf("map %q", name))
			var pk, puk []byte
			first := true
			err := tab.Scan(func(k, uk, v []byte) error {
				if c := bytes.Compare(pk, k); !first && (c > 0 || c == 0 && bytes.Compare(puk, uk) >= 0) {
					return fmt.Errorf("Scan out of order: %q/%q after %q/%q", k, uk, pk, puk)
				}
				first, pk, puk = false, bytes.Clone(k), bytes.Clone(uk)
				out = append(out, fmt.Sprintf("%q %q/%q=%q", name, k, uk, v))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	slices.Sort(out)
	return out
}

// uploadAndRestore snapshots b's one table as checkpoint id, and returns
// the file and a fresh backend restored from it.
func uploadAndRestore(t *testing.T, b *Memory, id checkpoint.ID) ([]byte, *Memory) {
	t.Helper()
	ctx := context.Background()
	s, err := b.Snapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	st := newFakeStorage()
	h, err := s.Upload(ctx, st, fmt.Sprintf("job/tasks/0/chk-%d/op/", id), "shared/")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Files) != 1 {
		t.Fatalf("%d files for one table", len(h.Files))
	}
	r := OpenMemory(MemoryOptions{})
	if err := r.Restore(ctx, st, h); err != nil {
		t.Fatalf("restore what Upload wrote: %v", err)
	}
	return st.objs[h.Files[0].Name], r
}

// sortedRecords reads a file of the current format version as its header
// and its records sorted by key.
func sortedRecords(t *testing.T, data []byte) []string {
	t.Helper()
	if len(data) < len(fileMagic)+2 || data[len(fileMagic)] != formatVersion {
		t.Fatalf("Upload wrote no version %d file: %q", formatVersion, data)
	}
	d := &decoder{b: data[len(fileMagic)+2:]}
	name := d.bytes()
	count := d.uvarint()
	head := fmt.Sprintf("%q kind %d name %q count %d", data[:len(fileMagic)+1], data[len(fileMagic)+1], name, count)
	var recs []string
	for range count {
		kl, rl := d.uvarint(), d.uvarint()
		key, rec := d.take(kl), d.take(rl)
		recs = append(recs, fmt.Sprintf("%q=%q", key, rec))
	}
	if d.err != nil || len(d.b) != 0 {
		t.Fatalf("Upload wrote a file it cannot read (%v, %d bytes left)", d.err, len(d.b))
	}
	slices.Sort(recs)
	return append([]string{head}, recs...)
}
