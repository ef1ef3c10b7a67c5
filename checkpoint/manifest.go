package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// ErrCorrupt is wrapped by errors about data that fails its checksum or size
// check: a manifest, or a state file read with GetVerified.
var ErrCorrupt = errors.New("checkpoint: corrupt data")

// maxManifestSize bounds what ReadManifest reads: a manifest lists file
// references, not data, so anything bigger is not one.
const maxManifestSize = 64 << 20

// envelope is the stored form of a manifest: the manifest body and a SHA-256
// over it. The hash covers the compact JSON of the body, so the stored file
// may be indented for people to read.
type envelope struct {
	Version  int             `json:"version"`
	SHA256   string          `json:"sha256"`
	Manifest json.RawMessage `json:"manifest"`
}

// EncodeManifest returns the stored form of m: versioned, checksummed JSON.
func EncodeManifest(m Manifest) ([]byte, error) {
	if m.Version != FormatVersion {
		return nil, fmt.Errorf("encode manifest of checkpoint %d: version %d, this build writes %d", m.Checkpoint, m.Version, FormatVersion)
	}
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode manifest of checkpoint %d: %w", m.Checkpoint, err)
	}
	sum := sha256.Sum256(body)
	out, err := json.MarshalIndent(envelope{Version: m.Version, SHA256: hex.EncodeToString(sum[:]), Manifest: body}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifest of checkpoint %d: %w", m.Checkpoint, err)
	}
	return append(out, '\n'), nil
}

// DecodeManifest parses what EncodeManifest wrote. It refuses a format
// version it does not know and data that fails its checksum (ErrCorrupt).
func DecodeManifest(b []byte) (Manifest, error) {
	var head struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return Manifest{}, fmt.Errorf("decode manifest: %w: %w", ErrCorrupt, err)
	}
	if head.Version != FormatVersion {
		return Manifest{}, fmt.Errorf("decode manifest: unsupported format version %d (this build reads version %d)", head.Version, FormatVersion)
	}
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return Manifest{}, fmt.Errorf("decode manifest: %w: %w", ErrCorrupt, err)
	}
	var body bytes.Buffer
	if err := json.Compact(&body, env.Manifest); err != nil {
		return Manifest{}, fmt.Errorf("decode manifest: %w: %w", ErrCorrupt, err)
	}
	sum := sha256.Sum256(body.Bytes())
	if got := hex.EncodeToString(sum[:]); got != env.SHA256 {
		return Manifest{}, fmt.Errorf("decode manifest: %w: sha256 of body is %s, manifest says %q", ErrCorrupt, got, env.SHA256)
	}
	var m Manifest
	if err := json.Unmarshal(body.Bytes(), &m); err != nil {
		return Manifest{}, fmt.Errorf("decode manifest: %w: %w", ErrCorrupt, err)
	}
	if m.Version != env.Version {
		return Manifest{}, fmt.Errorf("decode manifest: %w: body version %d, envelope version %d", ErrCorrupt, m.Version, env.Version)
	}
	return m, nil
}

// IDs are zero-padded in names so that names sort like IDs (see the package
// documentation for the layout).

const manifestFile = "manifest.json"

func tasksDir(job string, task int) string { return job + "/tasks/" + strconv.Itoa(task) + "/" }

// parseCheckpointObject splits an object name under a task's folder into
// its checkpoint id and the rest of the name past the checkpoint's folder;
// ok is false for a name this package does not write there.
func parseCheckpointObject(job string, task int, name string) (id ID, rest string, ok bool) {
	prefix := tasksDir(job, task)
	// A name outside the task's folder is not one of its checkpoints, even
	// if what follows looks like a checkpoint folder.
	inTask, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, "", false
	}
	dir, rest, ok := strings.Cut(inTask, "/")
	if !ok {
		return 0, "", false
	}
	digits, ok := strings.CutPrefix(dir, "chk-")
	if !ok {
		return 0, "", false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || CheckpointDir(job, task, ID(n)) != prefix+dir+"/" {
		return 0, "", false
	}
	return ID(n), rest, true
}

// CheckpointDir is the folder of checkpoint id of a task, ending in "/".
func CheckpointDir(job string, task int, id ID) string {
	return fmt.Sprintf("%schk-%020d/", tasksDir(job, task), uint64(id))
}

// ManifestName is the object name of the manifest of checkpoint id.
func ManifestName(job string, task int, id ID) string {
	return CheckpointDir(job, task, id) + manifestFile
}

// SharedDir is the folder of a task's files shared between checkpoints,
// ending in "/".
func SharedDir(job string, task int) string {
	return job + "/shared/" + strconv.Itoa(task) + "/"
}

// ListCheckpoints returns the completed checkpoints of a task (those with a
// manifest), ascending, and the highest ID seen at all, including folders of
// checkpoints that never completed: a restarted task continues after highest
// so that it never reuses an ID. It does not read the manifests.
func ListCheckpoints(ctx context.Context, st Storage, job string, task int) (completed []ID, highest ID, err error) {
	l, err := ListTask(ctx, st, job, task)
	return l.Completed, l.Highest, err
}

// TaskListing is what one listing of a task's checkpoints found.
type TaskListing struct {
	// Completed are the checkpoints with a manifest, ascending.
	Completed []ID
	// Highest is the highest checkpoint id seen, completed or not.
	Highest ID
	// CommitRecords are the names of the commit records (see
	// CommitRecord), ascending.
	CommitRecords []string
	// Holds are the names of the task's holds (see Hold), ascending.
	Holds []string
}

// ListTask lists a task's checkpoints and commit records, without reading
// them.
func ListTask(ctx context.Context, st Storage, job string, task int) (TaskListing, error) {
	prefix := tasksDir(job, task)
	names, err := st.List(ctx, prefix)
	if err != nil {
		return TaskListing{}, fmt.Errorf("list checkpoints of %s task %d: %w", job, task, err)
	}
	var l TaskListing
	for _, name := range names {
		if h, ok := holdName(job, task, name); ok {
			l.Holds = append(l.Holds, h)
			continue
		}
		id, rest, ok := parseCheckpointObject(job, task, name)
		if !ok {
			continue
		}
		l.Highest = max(l.Highest, id)
		switch {
		case rest == manifestFile:
			l.Completed = append(l.Completed, id)
		case isCommitRecord(rest):
			l.CommitRecords = append(l.CommitRecords, name)
		}
	}
	slices.Sort(l.Completed)
	l.Completed = slices.Compact(l.Completed)
	slices.Sort(l.CommitRecords)
	slices.Sort(l.Holds)
	return l, nil
}

// ReadManifest reads and verifies the manifest of checkpoint id of a task.
// A missing manifest wraps ErrNotFound. A manifest that names another job,
// task or checkpoint than its place in storage is refused.
func ReadManifest(ctx context.Context, st Storage, job string, task int, id ID) (Manifest, error) {
	name := ManifestName(job, task, id)
	rc, err := st.Get(ctx, name)
	if err != nil {
		return Manifest{}, fmt.Errorf("read manifest %s: %w", name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxManifestSize+1))
	if err != nil {
		return Manifest{}, fmt.Errorf("read manifest %s: %w", name, err)
	}
	if len(b) > maxManifestSize {
		return Manifest{}, fmt.Errorf("read manifest %s: %w: larger than %d bytes", name, ErrCorrupt, maxManifestSize)
	}
	m, err := DecodeManifest(b)
	if err != nil {
		return Manifest{}, fmt.Errorf("read manifest %s: %w", name, err)
	}
	if m.Job != job || m.Task != task || m.Checkpoint != id {
		return Manifest{}, fmt.Errorf("read manifest %s: %w: it describes job %q task %d checkpoint %d",
			name, ErrCorrupt, m.Job, m.Task, m.Checkpoint)
	}
	return m, nil
}
