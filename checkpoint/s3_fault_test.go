package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/faultproxy"
	"github.com/weirstream/weir/internal/testcluster"
)

var s3FaultSeed = flag.Uint64("s3fault.seed", 0, "seed of TestS3CheckpointsUnderFaults (0: random)")

// TestS3CheckpointsUnderFaults takes checkpoints through a proxy that
// injects 500s, resets (before and after S3 acted), cut bodies, delays and
// stalls: files first, the manifest only if every file is stored, then
// retention. Each operation either succeeds, possibly after retries, or
// fails; whatever happened, every manifest in the bucket must reference
// only files that exist with its checksums, and every checkpoint reported
// complete must have its manifest. Requests go one at a time, so a seed
// replays the same faults.
func TestS3CheckpointsUnderFaults(t *testing.T) {
	t.Parallel() // one of the slow ones: they overlap
	seed := *s3FaultSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -s3fault.seed=%d)", seed, seed)
	ctx := context.Background()
	b := testcluster.S3(t)
	p := startProxy(t, b.Endpoint, faultproxy.Options{
		Seed:       seed,
		Error500:   0.08,
		Reset:      0.05,
		ResetAfter: 0.06,
		Truncate:   0.04,
		Delay:      0.04,
		Stall:      0.02,
		DelayFor:   5 * time.Millisecond,
	})
	prefix := b.Prefix + "faults"
	st := newTestS3(t, b, p.URL, prefix, func(o *S3Options) {
		o.PartSize = MinS3PartSize
		o.Concurrency = 1
		o.MaxRetries = 3
		o.ResponseTimeout = 150 * time.Millisecond // ends a stall
	})
	clean := newTestS3(t, b, b.Endpoint, prefix, nil) // the truth, no faults
	p.Enable(true)

	rng := rand.New(rand.NewPCG(seed, 1))
	ret := NewRetainer(st, "j", 0, RetainOptions{Retained: 2, Concurrency: 1})
	uploaded := map[string]FileRef{} // shared files stored, by local name
	var live []string                // local names of the store's immutable files
	nextFile := 1
	var completed, failedFiles, failedManifest, retainErrors, getErrors int
	bigLeft := 2 // multipart files to write in the run
	verified := make(map[FileRef]bool)

	for id := ID(1); id <= 30; id++ {
		// The store changes: new files, some compacted away.
		var keep []string
		for _, l := range live {
			if rng.IntN(3) > 0 {
				keep = append(keep, l)
			}
		}
		live = keep
		for range 1 + rng.IntN(3) {
			live = append(live, fmt.Sprintf("%06d.sst", nextFile))
			nextFile++
		}

		var refs []FileRef
		err := func() error {
			for _, local := range live {
				if ref, ok := uploaded[local]; ok {
					refs = append(refs, ref)
					continue
				}
				size := 1 + rng.IntN(64<<10)
				if bigLeft > 0 && rng.IntN(8) == 0 {
					bigLeft--
					size = MinS3PartSize + 1<<20 // two parts
				}
				data := randomBytes(byte(nextFile+int(id)), size)
				ref, err := PutFile(ctx, st, SharedDir("j", 0)+"op/inst/"+local, bytes.NewReader(data))
				if err != nil {
					return err
				}
				ref.Local, ref.Shared = local, true
				uploaded[local] = ref
				refs = append(refs, ref)
			}
			ref, err := PutFile(ctx, st, CheckpointDir("j", 0, id)+"op/MANIFEST", strings.NewReader(fmt.Sprint("MANIFEST ", id)))
			if err != nil {
				return err
			}
			refs = append(refs, ref)
			return nil
		}()
		if err != nil {
			failedFiles++
			t.Logf("checkpoint %d: a file upload failed, no manifest: %v", id, err)
			continue
		}
		man, err := EncodeManifest(Manifest{
			Version: FormatVersion, Job: "j", Task: 0, Checkpoint: id,
			Operators: []Ack{{Operator: "op", State: &StateHandle{Backend: "test", Files: refs}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.PutIfAbsent(ctx, ManifestName("j", 0, id), man); err != nil {
			if errors.Is(err, ErrExists) {
				t.Fatalf("checkpoint %d: PutIfAbsent says another writer won, but there is none: %v", id, err)
			}
			failedManifest++
			t.Logf("checkpoint %d: manifest write failed: %v", id, err)
			continue
		}
		completed++
		// Reported complete: the manifest is there, with our bytes.
		got, err := readAll(ctx, clean, ManifestName("j", 0, id))
		if err != nil || !bytes.Equal(got, man) {
			t.Fatalf("checkpoint %d reported complete; its manifest reads %d bytes, %v", id, len(got), err)
		}
		// Read it back through the faults too: a Get succeeds with the
		// right bytes or fails, never returns wrong ones.
		if m, err := ReadManifest(ctx, st, "j", 0, id); err != nil {
			getErrors++
			t.Logf("checkpoint %d: reading the manifest back failed: %v", id, err)
		} else if len(m.Operators[0].State.Files) != len(refs) {
			t.Fatalf("checkpoint %d: manifest read back lists %d files, wrote %d", id, len(m.Operators[0].State.Files), len(refs))
		}
		if _, err := ret.Retain(ctx); err != nil {
			retainErrors++
			t.Logf("checkpoint %d: retention failed: %v", id, err)
		}
		checkManifests(t, clean, verified)
	}
	checkManifests(t, clean, verified)

	counts := p.Counts()
	t.Logf("checkpoints: %d complete, %d failed in a file upload, %d failed writing the manifest; "+
		"%d retention and %d read-back errors; %d manifest writes found to be our own after an unknown outcome; faults %v",
		completed, failedFiles, failedManifest, retainErrors, getErrors, st.ownWriteFound.Load(), counts)
	if completed < 10 {
		t.Errorf("only %d of 30 checkpoints completed: retries do not work", completed)
	}
	for _, f := range []faultproxy.Fault{faultproxy.Error500, faultproxy.Reset, faultproxy.ResetAfter, faultproxy.Truncate, faultproxy.Stall} {
		if counts[f] == 0 {
			t.Errorf("no %s injected: the test did not exercise it", f)
		}
	}
}

func readAll(ctx context.Context, st Storage, name string) ([]byte, error) {
	rc, err := st.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// checkManifests fails t unless every manifest of j task 0 in st
// references only files that exist with its sizes and checksums. Objects
// here are never rewritten, so a file verified once (recorded in verified)
// is only checked to be there.
func checkManifests(t *testing.T, st Storage, verified map[FileRef]bool) {
	t.Helper()
	ctx := context.Background()
	ids, _, err := ListCheckpoints(ctx, st, "j", 0)
	if err != nil {
		t.Fatal(err)
	}
	names, err := st.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	present := make(map[string]bool, len(names))
	for _, n := range names {
		present[n] = true
	}
	for _, id := range ids {
		m, err := ReadManifest(ctx, st, "j", 0, id)
		if err != nil {
			t.Fatalf("manifest %d: %v", id, err)
		}
		for _, f := range m.Operators[0].State.Files {
			if !present[f.Name] {
				t.Fatalf("manifest %d references %s, which does not exist", id, f.Name)
			}
			if !verified[f] {
				if _, err := ReadVerified(ctx, st, f); err != nil {
					t.Fatalf("manifest %d references %s: %v", id, f.Name, err)
				}
				verified[f] = true
			}
		}
	}
}
