package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"
	"unicode/utf8"

	"github.com/weirstream/weir/internal/fuzzseed"
)

// Fuzz targets for everything this package parses out of checkpoint
// storage: manifests, object names (checkpoint folders, claims, epochs)
// and verified file reads. Their seeds run with plain go test; to search,
// run one target at a time:
//
//	go test -run '^$' -fuzz '^FuzzDecodeManifest$' -fuzztime 5m -parallel 1 ./checkpoint

// fuzzSeed is one seed of a fuzz target (internal/fuzzseed).
type fuzzSeed = fuzzseed.Seed

// sealManifest wraps body in an envelope whose checksum matches it, so
// that the fuzzer reaches the body's decoding: it would never find a
// matching SHA-256 by mutation.
func sealManifest(body []byte) []byte {
	sum := "not json"
	var compact bytes.Buffer
	if json.Compact(&compact, body) == nil {
		s := sha256.Sum256(compact.Bytes())
		sum = hex.EncodeToString(s[:])
	}
	return fmt.Appendf(nil, `{"version":%d,"sha256":%q,"manifest":%s}`, FormatVersion, sum, body)
}

// comparableManifest is m as a decode of its encoding gives it back:
// encoding/json re-escapes raw committable data (HTML characters), leaves
// out empty lists (omitempty), and a timestamp keeps its instant but not
// always its zone. It copies what it changes.
func comparableManifest(m Manifest) Manifest {
	m.Timestamp = m.Timestamp.UTC()
	if m.Operators == nil {
		return m
	}
	ops := make([]Ack, len(m.Operators))
	for i, op := range m.Operators {
		if op.State != nil {
			s := *op.State
			s.Files = nilIfEmpty(s.Files)
			op.State = &s
		}
		op.Sources = nilIfEmpty(op.Sources)
		if op.Sources != nil {
			ss := make([]SourcePosition, len(op.Sources))
			for j, sp := range op.Sources {
				sp.Upstream = nilIfEmpty(sp.Upstream)
				ss[j] = sp
			}
			op.Sources = ss
		}
		op.Committables = nilIfEmpty(op.Committables)
		if op.Committables != nil {
			cs := make([]Committable, len(op.Committables))
			for j, c := range op.Committables {
				if len(c.Data) == 0 {
					c.Data = nil
				} else if d, err := json.Marshal(c.Data); err == nil {
					c.Data = d
				}
				cs[j] = c
			}
			op.Committables = cs
		}
		ops[i] = op
	}
	m.Operators = ops
	return m
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// FuzzDecodeManifest: no bytes make DecodeManifest panic; what it accepts
// encodes again, decodes to the same manifest, and encodes to the same
// bytes the second time; and ReadManifest refuses what it refuses with an
// error that names the manifest's object.
func FuzzDecodeManifest(f *testing.F) {
	good, err := EncodeManifest(testManifest())
	if err != nil {
		f.Fatal(err)
	}
	minimal, err := EncodeManifest(Manifest{Version: FormatVersion, Job: "job", Checkpoint: 1})
	if err != nil {
		f.Fatal(err)
	}
	body, err := json.Marshal(testManifest())
	if err != nil {
		f.Fatal(err)
	}
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "valid", Args: []any{good, false}},
		{Name: "valid-minimal", Args: []any{minimal, false}},
		{Name: "valid-body", Args: []any{body, true}},
		{Name: "corrupt-sha256", Args: []any{bytes.Replace(good, []byte(`"sha256": "`), []byte(`"sha256": "0`), 1), false}},
		{Name: "corrupt-offset", Args: []any{bytes.Replace(good, []byte(`"offset": 1234`), []byte(`"offset": 1235`), 1), false}},
		{Name: "truncated", Args: []any{good[:len(good)/2], false}},
		{Name: "future-version", Args: []any{bytes.Replace(good, []byte(`"version": 1`), []byte(`"version": 2`), 1), false}},
		{Name: "body-version-mismatch", Args: []any{[]byte(`{"version":2,"job":"job","checkpoint":1}`), true}},
		{Name: "body-wrong-types", Args: []any{[]byte(`{"version":1,"job":7,"task":"x","operators":{}}`), true}},
		{Name: "body-bad-time", Args: []any{[]byte(`{"version":1,"job":"job","checkpoint":1,"timestamp":"2026-13-01T00:00:00Z"}`), true}},
	})
	f.Fuzz(func(t *testing.T, b []byte, seal bool) {
		if seal {
			b = sealManifest(b)
		}
		m, err := DecodeManifest(b)
		checkReadManifest(t, b, m, err)
		if err != nil {
			return
		}
		enc, err := EncodeManifest(m)
		if err != nil {
			t.Fatalf("a decoded manifest does not encode: %v\n%+v", err, m)
		}
		m2, err := DecodeManifest(enc)
		if err != nil {
			t.Fatalf("a re-encoded manifest does not decode: %v\n%s", err, enc)
		}
		if got, want := comparableManifest(m2), comparableManifest(m); !reflect.DeepEqual(got, want) {
			t.Fatalf("decode(encode(m)) differs:\n got %+v\nwant %+v", got, want)
		}
		enc2, err := EncodeManifest(m2)
		if err != nil || !bytes.Equal(enc2, enc) {
			t.Fatalf("encoding is not stable (%v):\n%s\n%s", err, enc, enc2)
		}
	})
}

// checkReadManifest stores b as the manifest of checkpoint 1 of task 0 of
// "job" and checks ReadManifest against what DecodeManifest made of b.
func checkReadManifest(t *testing.T, b []byte, m Manifest, decodeErr error) {
	t.Helper()
	ctx := context.Background()
	st := NewMemory(MemoryOptions{MaxObjectSize: -1})
	name := ManifestName("job", 0, 1)
	if err := st.PutIfAbsent(ctx, name, b); err != nil {
		t.Fatal(err)
	}
	got, err := ReadManifest(ctx, st, "job", 0, 1)
	switch {
	case decodeErr != nil:
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Fatalf("ReadManifest of a manifest DecodeManifest refuses (%v) = %v, want an error naming %s", decodeErr, err, name)
		}
		if errors.Is(decodeErr, ErrCorrupt) != errors.Is(err, ErrCorrupt) {
			t.Fatalf("ReadManifest error %v and DecodeManifest error %v disagree on ErrCorrupt", err, decodeErr)
		}
	case m.Job != "job" || m.Task != 0 || m.Checkpoint != 1:
		if err == nil || !strings.Contains(err.Error(), name) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("ReadManifest of the manifest of %q task %d checkpoint %d = %v, want ErrCorrupt naming %s", m.Job, m.Task, m.Checkpoint, err, name)
		}
	default:
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("ReadManifest = %+v, %v; DecodeManifest gave %+v", got, err, m)
		}
	}
}

// FuzzManifestRoundTrip: a manifest made of arbitrary values encodes,
// unless its committable data is not JSON, and decodes to itself when its
// strings are UTF-8 (encoding/json replaces invalid bytes); encoding what
// a decode gave back writes the same bytes again.
func FuzzManifestRoundTrip(f *testing.F) {
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "typical", Args: []any{"orders", 3, uint64(17), int64(42), int64(1778051289123456789), "count", "orders/shared/3/abc-000001.sst", "000001.sst",
			int64(200), "0a1b2c3d", true, "in", int32(3), int64(1234), "orders-3-1", int64(7), int16(2), []byte(`{"x":1}`)}},
		{Name: "odd-strings", Args: []any{"a<&>\u2028", -1, uint64(1<<64 - 1), int64(-1), int64(-1 << 63), "\x00\"\\", "\xff\xfe", "",
			int64(-5), "", false, "\t", int32(-1 << 31), int64(-1 << 63), "é", int64(-1 << 63), int16(-1 << 15), []byte(` [ 1 , "<" ] `)}},
		{Name: "bad-data", Args: []any{"j", 0, uint64(1), int64(1), int64(0), "op", "n", "l", int64(1), "", false, "", int32(0), int64(0), "t", int64(0), int16(0), []byte(`{`)}},
	})
	f.Fuzz(func(t *testing.T, job string, task int, id uint64, epoch, ts int64, op, file, local string, size int64, crc string, shared bool,
		topic string, partition int32, offset int64, txn string, pid int64, pepoch int16, data []byte) {
		m := Manifest{
			Version:    FormatVersion,
			Job:        job,
			Task:       task,
			Checkpoint: ID(id),
			Timestamp:  time.Unix(0, ts).UTC(),
			Epoch:      epoch,
			Operators: []Ack{
				{Operator: op, State: &StateHandle{Backend: "pebble", Size: size, Incremental: size / 2,
					Files: []FileRef{{Name: file, Local: local, Size: size, CRC32C: crc, Shared: shared}}},
					Alignment: time.Duration(offset), Watermark: &ts},
				{Operator: op + "-source", Sources: []SourcePosition{{Source: op, Topic: topic, Partition: partition, Offset: offset, MaxTimestamp: &ts,
					Upstream: []UpstreamWatermark{{Watermark: ts, Idle: shared}}}}},
				{Operator: op + "-sink", Committables: []Committable{{Operator: op, TransactionalID: txn, ProducerID: pid, Epoch: pepoch, Data: data}}},
			},
		}
		if len(data) == 0 {
			m.Operators[2].Committables[0].Data = nil
		}
		enc, err := EncodeManifest(m)
		if err != nil {
			if json.Valid(data) {
				t.Fatalf("encode: %v", err)
			}
			return
		}
		got, err := DecodeManifest(enc)
		if err != nil {
			t.Fatalf("decode what EncodeManifest wrote: %v\n%s", err, enc)
		}
		if allUTF8(job, op, file, local, crc, topic, txn) {
			if got, want := comparableManifest(got), comparableManifest(m); !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
			}
		}
		// encoding/json writes an invalid byte as \ufffd and the decoded
		// U+FFFD as itself: stable from the second encoding on.
		enc2, err := EncodeManifest(got)
		if err != nil {
			t.Fatalf("encode a decoded manifest: %v", err)
		}
		if !allUTF8(job, op, file, local, crc, topic, txn) {
			enc = enc2
			got2, err := DecodeManifest(enc)
			if err != nil {
				t.Fatalf("decode what EncodeManifest wrote: %v\n%s", err, enc)
			}
			if enc2, err = EncodeManifest(got2); err != nil {
				t.Fatalf("encode a decoded manifest: %v", err)
			}
		}
		if !bytes.Equal(enc2, enc) {
			t.Fatalf("encoding is not stable:\n%s\n%s", enc, enc2)
		}
	})
}

func allUTF8(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// FuzzObjectNames: the names a listing returns are anybody's, so no name
// makes the parsers of checkpoint folders, claims and epochs panic or
// take a name for one they did not write; and the names this package
// writes parse back to what made them.
func FuzzObjectNames(f *testing.F) {
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "manifest", Args: []any{"job", 3, uint64(17), "manifest.json", ManifestName("job", 3, 17)}},
		{Name: "owner-file", Args: []any{"job", 0, uint64(1), "e42-abc/op/state", OwnerDir("job", 0, 1, 42, "abc") + "op/state"}},
		{Name: "claim", Args: []any{"job", 1, uint64(0), "", claimName("job", 1, 42)}},
		{Name: "epoch", Args: []any{"job", 0, uint64(0), "", fmt.Sprintf("%s%020d", epochsDir("job"), 7)}},
		{Name: "epoch-max", Args: []any{"job", 0, uint64(0), "", fmt.Sprintf("%s%020d", epochsDir("job"), int64(math.MaxInt64))}},
		{Name: "short-id", Args: []any{"job", 0, uint64(5), "x", "job/tasks/0/chk-5/manifest.json"}},
		{Name: "signed-id", Args: []any{"job", 0, uint64(5), "x", "job/tasks/0/chk-+0000000000000000005/manifest.json"}},
		{Name: "negative-claim", Args: []any{"job", 0, uint64(0), "", "job/tasks/0/owner--0000000000000000001"}},
		{Name: "huge-id", Args: []any{"job", 0, uint64(1<<64 - 1), "manifest.json", "job/tasks/0/chk-99999999999999999999/manifest.json"}},
	})
	f.Fuzz(func(t *testing.T, job string, task int, id uint64, rest, name string) {
		// Names this package makes parse back.
		made := CheckpointDir(job, task, ID(id)) + rest
		if gid, grest, ok := parseCheckpointObject(job, task, made); !ok || gid != ID(id) || grest != rest {
			t.Fatalf("parseCheckpointObject(%q) = %d, %q, %v; want %d, %q", made, gid, grest, ok, id, rest)
		}
		// Any name: parsed only if it is one this package would make.
		if gid, grest, ok := parseCheckpointObject(job, task, name); ok && CheckpointDir(job, task, gid)+grest != name {
			t.Fatalf("parseCheckpointObject(%q) = %d, %q: not the name it came from", name, gid, grest)
		}
		// The same through a storage's listing, for claims and epochs too.
		ctx := context.Background()
		st := NewMemory(MemoryOptions{})
		if st.PutIfAbsent(ctx, name, nil) != nil {
			return // not a name any storage holds
		}
		completed, highest, err := ListCheckpoints(ctx, st, job, task)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range completed {
			if ManifestName(job, task, c) != name || c > highest {
				t.Fatalf("ListCheckpoints took %q for the manifest of checkpoint %d (highest %d)", name, c, highest)
			}
		}
		epochs, err := Claims(ctx, st, job, task)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range epochs {
			if claimName(job, task, e) != name {
				t.Fatalf("Claims took %q for the claim of epoch %d", name, e)
			}
		}
		// NextEpoch allocates above every epoch it recognises: a name it
		// took for one must be that epoch's.
		if !strings.HasPrefix(name, epochsDir(job)) {
			return
		}
		var e int64
		_, err = fmt.Sscanf(strings.TrimPrefix(name, epochsDir(job)), "%020d", &e)
		isEpoch := err == nil && fmt.Sprintf("%s%020d", epochsDir(job), e) == name
		next, err := NextEpoch(ctx, st, job)
		switch {
		case err != nil && !(isEpoch && e == math.MaxInt64):
			t.Fatalf("NextEpoch after object %q: %v", name, err)
		case err == nil && isEpoch && next <= e:
			t.Fatalf("NextEpoch = %d after epoch object %q", next, name)
		}
	})
}

// FuzzReadVerified: whatever a storage returns, a verified read fails
// with ErrCorrupt, naming the object, unless the bytes have the size and
// checksum the reference says; and a reference made from the bytes
// always verifies. The reads come one byte at a time too, as a network
// stream may deliver them.
func FuzzReadVerified(f *testing.F) {
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "matches", Args: []any{[]byte("state"), false, int64(-1), "", false}},
		{Name: "matches-sha256", Args: []any{[]byte("state"), true, int64(-1), "", true}},
		{Name: "short", Args: []any{[]byte("stat"), false, int64(5), "a8a8b38e", false}},
		{Name: "long", Args: []any{[]byte("states"), false, int64(5), "a8a8b38e", true}},
		{Name: "no-checksum", Args: []any{[]byte("state"), false, int64(5), "", false}},
		{Name: "uppercase-checksum", Args: []any{[]byte("state"), false, int64(5), "A8A8B38E", false}},
		{Name: "negative-size", Args: []any{[]byte(""), false, int64(-5), "00000000", false}},
	})
	f.Fuzz(func(t *testing.T, data []byte, useSHA bool, size int64, sum string, oneByte bool) {
		ctx := context.Background()
		const name = "job/shared/0/inst/000001.sst"
		st := NewMemory(MemoryOptions{MaxObjectSize: -1})
		if err := st.Put(ctx, name, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		crc := fmt.Sprintf("%08x", crc32.Checksum(data, castagnoli))
		sha := sha256.Sum256(data)
		ref := FileRef{Name: name, Size: size}
		exact := size < 0 // the fuzzer's way to ask for a matching reference
		if exact {
			ref.Size = int64(len(data))
		}
		switch {
		case useSHA && exact:
			ref.SHA256 = hex.EncodeToString(sha[:])
		case useSHA:
			ref.SHA256 = sum
		case exact:
			ref.CRC32C = crc
		default:
			ref.CRC32C = sum
		}
		got, err := readVerified(ctx, st, ref, oneByte)
		matches := ref.Size == int64(len(data)) &&
			((ref.CRC32C != "" && ref.CRC32C == crc) || (ref.CRC32C == "" && ref.SHA256 != "" && ref.SHA256 == hex.EncodeToString(sha[:])))
		if matches {
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("verified read of matching data = %q, %v", got, err)
			}
			return
		}
		if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name) {
			t.Fatalf("verified read of %d bytes against %+v = %v, want ErrCorrupt naming the object", len(data), ref, err)
		}
	})
}

func readVerified(ctx context.Context, st Storage, ref FileRef, oneByte bool) ([]byte, error) {
	if !oneByte {
		return ReadVerified(ctx, st, ref)
	}
	rc, err := GetVerified(ctx, st, ref)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(iotest.OneByteReader(rc))
}

// TestParseCheckpointObjectOutsideTask: a name that is not under the
// task's folder is none of its checkpoints, even when it looks like a
// checkpoint folder on its own (FuzzObjectNames found it).
func TestParseCheckpointObjectOutsideTask(t *testing.T) {
	for _, name := range []string{
		"chk-00000000000000000000/",
		"chk-00000000000000000005/manifest.json",
		"other/tasks/0/chk-00000000000000000005/manifest.json",
		"job/tasks/1/chk-00000000000000000005/manifest.json",
	} {
		if id, rest, ok := parseCheckpointObject("job", 0, name); ok {
			t.Errorf("parseCheckpointObject(job, 0, %q) = %d, %q, true", name, id, rest)
		}
	}
	if id, rest, ok := parseCheckpointObject("job", 0, ManifestName("job", 0, 5)); !ok || id != 5 || rest != manifestFile {
		t.Errorf("the manifest of checkpoint 5 parses as %d, %q, %v", id, rest, ok)
	}
}

// TestNextEpochAfterTheLargest: with the largest int64 recorded as an
// epoch (--epoch by hand), no larger one exists; NextEpoch says so
// instead of wrapping around to an epoch below it, which every earlier
// owner would outrank.
func TestNextEpochAfterTheLargest(t *testing.T) {
	ctx := context.Background()
	st := NewMemory(MemoryOptions{})
	if err := RecordEpoch(ctx, st, "job", math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	if e, err := NextEpoch(ctx, st, "job"); err == nil || !strings.Contains(err.Error(), "largest") {
		t.Fatalf("NextEpoch = %d, %v; want an error", e, err)
	}
}
