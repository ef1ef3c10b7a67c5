package state

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/fuzzseed"
)

// FuzzCatalogEntry: a catalog value of a restored DB decodes to an entry
// of a known kind and a table id other than the catalog's, or fails;
// a decoded entry encodes to a value that decodes to it again.
func FuzzCatalogEntry(f *testing.F) {
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "value-1", Args: []any{catalogEntry{kind: kindValue, id: 1}.encode()}},
		{Name: "map-300", Args: []any{catalogEntry{kind: kindMap, id: 300}.encode()}},
		{Name: "list-max", Args: []any{catalogEntry{kind: kindList, id: 1<<64 - 1}.encode()}},
		{Name: "catalog-id", Args: []any{[]byte{byte(kindValue), catalogID}}},
		{Name: "unknown-kind", Args: []any{[]byte{9, 1}}},
		{Name: "trailing-byte", Args: []any{[]byte{byte(kindValue), 1, 0}}},
		{Name: "long-varint", Args: []any{[]byte{byte(kindValue), 0x81, 0x80, 0x00}}},
		{Name: "overflow", Args: []any{[]byte{byte(kindMap), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}}},
	})
	f.Fuzz(func(t *testing.T, v []byte) {
		e, err := decodeCatalogEntry(v)
		if err != nil {
			return
		}
		if e.kind < kindValue || e.kind > kindMap || e.id == catalogID {
			t.Fatalf("%x decodes to %+v", v, e)
		}
		// A varint may be written longer than it needs; the entry is the
		// same once written the short way.
		if e2, err := decodeCatalogEntry(e.encode()); err != nil || e2 != e {
			t.Fatalf("%+v encodes to %x, which decodes to %+v, %v", e, e.encode(), e2, err)
		}
	})
}

// FuzzMapKey: a map's keys in Pebble are the escaped key, then the user
// key. Escaping is reversible whatever the bytes, keeps byte order, and
// no escaped key is a prefix of another (else one key's entries would
// show up under another); and no stored bytes make cutEscaped panic.
func FuzzMapKey(f *testing.F) {
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "plain", Args: []any{[]byte("k"), []byte("u"), []byte("k2")}},
		{Name: "zeros", Args: []any{[]byte("\x00"), []byte("\x00\x01"), []byte("\x00\x00")}},
		{Name: "escape-lookalike", Args: []any{[]byte("a\x00\xff"), []byte(""), []byte("a\x00")}},
		{Name: "ff", Args: []any{[]byte("\xff"), []byte("\xff"), []byte("\xff\x00")}},
		{Name: "empty", Args: []any{[]byte(""), []byte(""), []byte("\x01")}},
	})
	f.Fuzz(func(t *testing.T, key, userKey, other []byte) {
		stored := append(appendEscaped([]byte("pre"), key)[3:], userKey...)
		k, uk, err := cutEscaped(nil, stored)
		if err != nil || !bytes.Equal(k, key) || !bytes.Equal(uk, userKey) {
			t.Fatalf("%q, %q stored as %q reads back as %q, %q, %v", key, userKey, stored, k, uk, err)
		}
		ea, eb := appendEscaped(nil, key), appendEscaped(nil, other)
		if c, want := bytes.Compare(ea, eb), bytes.Compare(key, other); c != want {
			t.Fatalf("%q and %q compare %d, escaped %d", key, other, want, c)
		}
		if !bytes.Equal(key, other) && (bytes.HasPrefix(ea, eb) || bytes.HasPrefix(eb, ea)) {
			t.Fatalf("escaped %q is a prefix of escaped %q or the other way", key, other)
		}
		// Arbitrary bytes, as a damaged or foreign DB holds: a key that
		// reads back is the escaping of what it reads as.
		k, rest, err := cutEscaped([]byte("dst"), other)
		if err == nil && !bytes.Equal(append(appendEscaped(nil, k[3:]), rest...), other) {
			t.Fatalf("%q reads as %q, %q: not its escaping", other, k[3:], rest)
		}
	})
}

// FuzzRestoredList: the restored list of a DB directory is read after a
// crash that may have cut it anywhere, or from a directory something
// else wrote. No content makes readRestoredList panic; every object it
// returns is "<instance>/<shared file name>"; and of a list written in
// the format, it returns exactly the whole lines, whatever the cut.
func FuzzRestoredList(f *testing.F) {
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "two-files", Args: []any{[]byte("inst1/000004.sst\ninst2/000007.blob\n"), "job/shared/0/inst3/000009.sst", "000009.sst", uint16(20)}},
		{Name: "torn", Args: []any{[]byte("inst1/000004.sst\ninst1/0000"), "x/i/1.sst", "1.sst", uint16(5)}},
		{Name: "not-shared", Args: []any{[]byte("inst1/MANIFEST-000001\n/000004.sst\ninst/a/b.sst\n"), "x/i/OPTIONS-1", "OPTIONS-1", uint16(0)}},
		{Name: "newline-in-name", Args: []any{[]byte(""), "x/in\nst/1.sst", "1.sst", uint16(3)}},
		{Name: "no-instance", Args: []any{[]byte("\n\n"), "1.sst", "1.sst", uint16(1)}},
	})
	dir := f.TempDir()
	path := filepath.Join(dir, restoredList)
	f.Fuzz(func(t *testing.T, content []byte, name, local string, cut uint16) {
		// Anything on disk.
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, obj := range readRestoredList(dir) {
			inst, file, ok := strings.Cut(obj, "/")
			if !ok || inst == "" || file != filepath.Base(file) || !isShared(file) || strings.Contains(obj, "\n") {
				t.Fatalf("read %q from %q", obj, content)
			}
		}

		// A list as a restore writes it: one line per shared file whose
		// object names its instance, of a handle with the fuzzed file
		// and a usual one.
		files := []checkpoint.FileRef{
			{Name: "job/shared/0/inst0/000004.sst", Local: "000004.sst", Shared: true},
			{Name: name, Local: local, Shared: true},
		}
		var list []byte
		var lines []string // the lines a read takes, each with the list's length after it
		var ends []int
		for _, f := range files {
			if inst, ok := objectInstance(f); ok {
				line := inst + "/" + f.Local
				list = append(list, line+"\n"...)
				if !strings.Contains(line, "\n") && f.Local == filepath.Base(f.Local) && isShared(f.Local) {
					lines, ends = append(lines, line), append(ends, len(list))
				}
			}
		}
		n := int(cut) % (len(list) + 1)
		if err := os.WriteFile(path, list[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		got := readRestoredList(dir)
		var whole []string // the lines the cut left whole
		for i, l := range lines {
			if ends[i] <= n {
				whole = append(whole, l)
			}
		}
		if strings.Contains(name+local, "\n") {
			return // a line break in a name splits its line: only the checks above hold
		}
		if !slices.Equal(got, whole) {
			t.Fatalf("list %q cut at %d reads as %q, want %q", list, n, got, whole)
		}
	})
}

// TestPebbleRestoreBadContentNamesObject: a file whose size and checksum
// match its reference but which Pebble refuses (uploaded that way) fails
// the restore with an error naming its object in storage, as a file that
// fails its checksum does (TestPebbleRestoreBadFile); and the state stays.
func TestPebbleRestoreBadContentNamesObject(t *testing.T) {
	ctx := context.Background()
	p := openTestPebble(t, smallPebble)
	fillValues(t, mustValue(t, p, "v"), 0, 2000, 100, "x")
	if err := p.flushValues(); err != nil {
		t.Fatal(err)
	}
	if err := p.db.Flush(); err != nil { // an SST to damage, whatever the cut
		t.Fatal(err)
	}
	s, err := p.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	st := newFakeStorage()
	h, err := s.Upload(ctx, st, "chk-1/op/", "shared/op/")
	if err != nil {
		t.Fatal(err)
	}
	flip := func(b []byte) []byte {
		out := bytes.Clone(b)
		for i := range out {
			out[i] ^= 0x5a
		}
		return out
	}
	half := func(b []byte) []byte { return bytes.Clone(b[:len(b)/2]) }
	for _, tc := range []struct {
		name   string
		victim func(f checkpoint.FileRef) bool
		damage func([]byte) []byte
	}{
		{"garbage SST", func(f checkpoint.FileRef) bool { return f.Shared && strings.HasSuffix(f.Local, ".sst") }, flip},
		{"half an SST", func(f checkpoint.FileRef) bool { return f.Shared && strings.HasSuffix(f.Local, ".sst") }, half},
		{"garbage MANIFEST", func(f checkpoint.FileRef) bool { return strings.HasPrefix(f.Local, "MANIFEST-") }, flip},
		{"half an OPTIONS", func(f checkpoint.FileRef) bool { return strings.HasPrefix(f.Local, "OPTIONS-") }, half},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := h
			bad.Files = slices.Clone(h.Files)
			i := slices.IndexFunc(bad.Files, tc.victim)
			if i < 0 {
				t.Fatalf("no such file in %+v", h.Files)
			}
			f := bad.Files[i]
			ref, err := checkpoint.PutFile(ctx, st, f.Name+".bad", bytes.NewReader(tc.damage(st.objs[f.Name])))
			if err != nil {
				t.Fatal(err)
			}
			ref.Local, ref.Shared = f.Local, f.Shared
			bad.Files[i] = ref
			q := openTestPebble(t, smallPebble)
			qv := mustValue(t, q, "v")
			qv.Put([]byte("mine"), []byte("kept"))
			err = q.Restore(ctx, st, bad)
			if err == nil || !strings.Contains(err.Error(), ref.Name) {
				t.Fatalf("Restore = %v; want an error naming %s", err, ref.Name)
			}
			if got, ok, _ := qv.Get([]byte("mine")); !ok || string(got) != "kept" {
				t.Errorf("failed restore changed the state: %q %v", got, ok)
			}
		})
	}
}

func TestMentionsFile(t *testing.T) {
	for _, tc := range []struct {
		msg, local string
		want       bool
	}{
		{`malformed manifest file "MANIFEST-000001"`, "MANIFEST-000001", true},
		{"backing file 000004 error: invalid table 000004", "000004.sst", true},
		{"L0: 000004: object size mismatch (/d/000004.sst)", "000004.sst", true},
		{"size 1000049 != 2000041", "000004.sst", false},
		{"file 0000041 missing", "000004.sst", false},
		{"file 000004", "000004.blob", true},
		{"invalid key=value syntax", "OPTIONS-000003", false},
		{"anything", "", false},
	} {
		if got := mentionsFile(tc.msg, tc.local); got != tc.want {
			t.Errorf("mentionsFile(%q, %q) = %v, want %v", tc.msg, tc.local, got, tc.want)
		}
	}
}

// FuzzPebbleRestore damages one file of a Pebble snapshot (overwrites
// bytes at an offset, or cuts it there) and uploads it with a matching
// checksum, as a writer that uploaded bad data would: no damage makes
// Restore panic, and a restore that fails names the damaged object and
// leaves the state as it was.
func FuzzPebbleRestore(f *testing.F) {
	ctx := context.Background()
	p := openTestPebble(f, smallPebble)
	fillValues(f, mustValue(f, p, "v"), 0, 300, 50, "x")
	m := mustMap(f, p, "m")
	m.Put([]byte("k\x00"), []byte("u"), []byte("v"))
	mustList(f, p, "l").Append([]byte("k"), []byte("item"))
	if err := p.flushValues(); err != nil {
		f.Fatal(err)
	}
	if err := p.db.Flush(); err != nil {
		f.Fatal(err)
	}
	s, err := p.Snapshot(1)
	if err != nil {
		f.Fatal(err)
	}
	st := newFakeStorage()
	h, err := s.Upload(ctx, st, "chk-1/op/", "shared/op/")
	s.Release()
	if err != nil {
		f.Fatal(err)
	}
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "sst-byte", Args: []any{uint8(slices.IndexFunc(h.Files, func(f checkpoint.FileRef) bool { return isShared(f.Local) })), uint32(100), []byte{0xff}, false}},
		{Name: "sst-cut", Args: []any{uint8(slices.IndexFunc(h.Files, func(f checkpoint.FileRef) bool { return isShared(f.Local) })), uint32(1000), []byte{}, true}},
		{Name: "manifest-byte", Args: []any{uint8(slices.IndexFunc(h.Files, func(f checkpoint.FileRef) bool { return strings.HasPrefix(f.Local, "MANIFEST-") })), uint32(20), []byte{0, 0, 0, 0}, false}},
		{Name: "options-cut", Args: []any{uint8(slices.IndexFunc(h.Files, func(f checkpoint.FileRef) bool { return strings.HasPrefix(f.Local, "OPTIONS-") })), uint32(40), []byte{}, true}},
		{Name: "marker", Args: []any{uint8(slices.IndexFunc(h.Files, func(f checkpoint.FileRef) bool { return strings.HasPrefix(f.Local, "marker.") })), uint32(0), []byte("x"), false}},
	})
	f.Fuzz(func(t *testing.T, which uint8, offset uint32, patch []byte, cut bool) {
		bad := h
		bad.Files = slices.Clone(h.Files)
		i := int(which) % len(bad.Files)
		good := bad.Files[i]
		data := bytes.Clone(st.objs[good.Name])
		at := int(offset) % (len(data) + 1)
		if cut {
			data = data[:at]
		} else {
			data = append(data[:at], append(patch, data[min(at+len(patch), len(data)):]...)...)
		}
		obj := fmt.Sprintf("%s.bad-%d", good.Name, i)
		ref, err := checkpoint.PutFile(ctx, st, obj, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		ref.Local, ref.Shared = good.Local, good.Shared
		bad.Files[i] = ref

		q := openTestPebble(t, smallPebble)
		qv := mustValue(t, q, "v")
		qv.Put([]byte("mine"), []byte("kept"))
		err = q.Restore(ctx, st, bad)
		if err == nil {
			return // damage Pebble does not see (a WAL's tail, say): the checksum was the guard
		}
		if !strings.Contains(err.Error(), obj) {
			t.Fatalf("a restore with %s damaged fails without naming it: %v", obj, err)
		}
		if got, ok, _ := qv.Get([]byte("mine")); !ok || string(got) != "kept" {
			t.Fatalf("failed restore changed the state: %q %v", got, ok)
		}
	})
}
