package checkpoint

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
)

// DefaultRetained is how many completed checkpoints of a task retention
// keeps by default.
const DefaultRetained = 3

// DefaultRetainConcurrency bounds the deletes a Retainer has in flight.
const DefaultRetainConcurrency = 8

// RetainOptions configures a Retainer.
type RetainOptions struct {
	// Retained is how many of the newest completed checkpoints to keep; 0:
	// DefaultRetained.
	Retained int
	// Concurrency bounds the deletes in flight; 0: DefaultRetainConcurrency.
	Concurrency int
	// Logger; nil: no logs.
	Logger *slog.Logger
}

// Retainer deletes what a task's checkpoints no longer need: the folders of
// checkpoints older than the newest Retained completed ones, and shared
// files that no retained manifest references. The task's owner calls Retain
// after each checkpoint that completed; the Retainer remembers, between
// calls, which shared files it saw unreferenced, because that is how it
// tells garbage from files that a checkpoint in progress has uploaded or
// will reuse.
//
// # What it deletes
//
// Let newest be the newest completed checkpoint (one with a manifest) and
// oldest the oldest of the newest Retained completed ones. A call deletes
//
//  1. the folder of every checkpoint below oldest, completed or not, except
//     those named in inProgress: the manifest first, so that a half-deleted
//     checkpoint is never taken for a complete one, then its other files
//     (but never one a retained manifest references);
//  2. a shared file that no retained manifest references, if a manifest the
//     call deletes referenced it, or if the previous call (with an older
//     newest) saw it unreferenced too.
//
// It never deletes anything of a checkpoint above newest (it may be in
// progress), anything it cannot parse, or, when a retained manifest cannot
// be read, anything at all. Any id in inProgress at or below newest turns
// off the deletion of shared files for that call.
//
// # Why deleting shared files is safe
//
// A checkpoint in progress may reference a shared file it did not upload:
// incremental backends (Pebble) reuse every file still in the store that an
// earlier checkpoint of the same store instance, failed ones included, or
// the manifest it was restored from, uploaded. The rule rests on the
// duties below, chiefly that a manifest references every immutable file of
// its snapshot and a file, once gone from the store, never comes back.
// Then a file's life in a store is one interval, and a checkpoint p that
// reuses file f, uploaded for an earlier checkpoint k of the same store,
// has every checkpoint between k and p reference f too.
//
//   - Rule 2a: f was in a manifest m below oldest and is in no retained
//     manifest, newest included: the store that wrote newest never had f
//     (another instance's file it did not restore) or dropped it before
//     newest's snapshot, so no later checkpoint of that store holds it.
//   - Rule 2b: f was listed by the previous call before that call listed
//     the checkpoints and saw newest' < newest. So newest completed after f
//     was uploaded; the checkpoint k that uploaded f precedes newest (one
//     checkpoint in flight per store), and any p after newest that reuses f
//     has newest reference f, which it does not. (k cannot be p or
//     another checkpoint whose snapshot is younger than newest's: those
//     snapshots were taken after newest completed.) Listing the shared files
//     before the checkpoints is what makes "listed" mean "uploaded before
//     newest completed".
//
// A file that a checkpoint in progress uploads itself is younger than the
// previous call's listing (or newest did not advance), so neither rule
// takes it. Garbage that a crash or a failed checkpoint left is taken by
// rule 2b on the second call after it appeared; a fresh Retainer (a
// restarted worker) deletes by rule 2b only from its second call on.
//
// # Duties of the caller
//
//   - Call Retain only after a checkpoint's manifest is durable, from the
//     task's current owner (the one that completed it), and not from a
//     zombie: a fenced owner's manifests still count as completed here.
//   - One store instance has one checkpoint in flight at a time: it takes
//     the snapshot of checkpoint n+1 only after n completed or was given up
//     (the uploads of a given-up checkpoint may still be running; that is
//     fine, its snapshot is older).
//   - A manifest references every immutable (shared) file of its snapshot,
//     also those reused from earlier checkpoints; a shared file is
//     referenced only while the store holds it; shared names are unique
//     per store instance (DESIGN.md: instance id plus file name) and an
//     object, once written, is never rewritten with other bytes.
//   - Pass in inProgress any checkpoint whose manifest write may still land
//     although newer ones completed (normally none: with one checkpoint in
//     flight, that one is above newest and protected anyway).
//
// A Retainer is safe for concurrent use; calls run one at a time.
type Retainer struct {
	st          Storage
	job         string
	task        int
	retained    int
	concurrency int
	log         *slog.Logger

	mu       sync.Mutex
	marked   map[string]bool // shared files the last call saw unreferenced
	markedAt ID              // newest completed checkpoint that call saw
	haveMark bool
	// refs holds, per manifest object the last call retained, the shared
	// files it references, so that the next call does not read and decode
	// it again (an owner at a short interval calls every second). A
	// manifest object is written once (PutIfAbsent, by the owner of its
	// checkpoint's epoch) and never rewritten, so what its name held once
	// it holds while List shows it.
	refs map[string][]string

	// told holds the shared files of the manifests Completed was given
	// since the last call, by checkpoint, so that a call need not read
	// back what its own owner wrote (at 100 ms checkpoints, ten manifests
	// a second, most of them deleted unread otherwise). Its own lock:
	// Completed runs on the driver, which must not wait for a call.
	toldMu sync.Mutex
	told   map[ID]toldManifest

	// eagerSweep deletes every unreferenced shared file at once. It is
	// unsafe, and there only so that tests show they catch it.
	eagerSweep bool
}

// NewRetainer returns a Retainer for one task.
func NewRetainer(st Storage, job string, task int, opts RetainOptions) *Retainer {
	if opts.Retained <= 0 {
		opts.Retained = DefaultRetained
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultRetainConcurrency
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Retainer{
		st:          st,
		job:         job,
		task:        task,
		retained:    opts.Retained,
		concurrency: opts.Concurrency,
		log:         opts.Logger.With("job", job, "task", task),
	}
}

// toldManifest is what Completed keeps of a manifest.
type toldManifest struct {
	name  string
	files []string
}

// maxTold bounds the manifests a Retainer keeps from Completed between
// two calls; past it, the oldest are dropped (and read back if needed).
const maxTold = 256

// Completed tells r the manifest m of a checkpoint of its task that its
// owner wrote (PutIfAbsent succeeded) and completed, so that the next
// call takes m's shared files from here instead of reading the object
// back. An object is never rewritten once written, so the name holds m
// for as long as List shows it. A manifest of another job or task is
// ignored.
func (r *Retainer) Completed(m Manifest) {
	if m.Job != r.job || m.Task != r.task {
		return
	}
	r.toldMu.Lock()
	defer r.toldMu.Unlock()
	if r.told == nil {
		r.told = make(map[ID]toldManifest)
	}
	r.told[m.Checkpoint] = toldManifest{name: ManifestName(r.job, r.task, m.Checkpoint), files: stateFiles(m)}
	if len(r.told) > maxTold {
		delete(r.told, slices.Min(slices.Collect(maps.Keys(r.told))))
	}
}

// toldRefs returns the shared files of manifest name of checkpoint id if
// Completed was given it.
func (r *Retainer) toldRefs(name string, id ID) ([]string, bool) {
	r.toldMu.Lock()
	defer r.toldMu.Unlock()
	t, ok := r.told[id]
	if !ok || t.name != name {
		return nil, false
	}
	return t.files, true
}

// forgetTold drops what Completed gave of checkpoints at or below newest:
// a call has taken them into refs or deleted them.
func (r *Retainer) forgetTold(newest ID) {
	r.toldMu.Lock()
	defer r.toldMu.Unlock()
	maps.DeleteFunc(r.told, func(id ID, _ toldManifest) bool { return id <= newest })
}

// Retain runs retention once with a fresh Retainer: it deletes old
// checkpoint folders and the shared files only their manifests referenced
// (rule 2a), but no other unreferenced shared file, since one call alone
// cannot tell those from files of a checkpoint in progress. retained <= 0
// means DefaultRetained. A long-lived owner uses a Retainer instead.
func Retain(ctx context.Context, st Storage, job string, task int, retained int, inProgress ...ID) (deleted []string, err error) {
	return NewRetainer(st, job, task, RetainOptions{Retained: retained}).Retain(ctx, inProgress...)
}

// Retain deletes what the task's retained checkpoints and those in
// progress do not need (see Retainer) and returns the names it deleted,
// also on error. An error leaves storage consistent: a later call finishes
// the work.
func (r *Retainer) Retain(ctx context.Context, inProgress ...ID) (deleted []string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()

	// Shared files first: see rule 2b.
	shared, err := r.st.List(ctx, SharedDir(r.job, r.task))
	if err != nil {
		return nil, fmt.Errorf("retain %s task %d: %w", r.job, r.task, err)
	}
	folders, err := r.listFolders(ctx)
	if err != nil {
		return nil, fmt.Errorf("retain %s task %d: %w", r.job, r.task, err)
	}
	var completed []ID
	for id, f := range folders {
		if f.manifest != "" {
			completed = append(completed, id)
		}
	}
	if len(completed) == 0 {
		return nil, nil // every folder may be in progress
	}
	slices.Sort(completed)
	newest := completed[len(completed)-1]
	kept := completed[max(0, len(completed)-r.retained):]
	oldest := kept[0]

	live := make(map[string]bool)
	refs := make(map[string][]string, len(kept))
	for _, id := range kept {
		files, err := r.manifestRefs(ctx, folders[id].manifest, id)
		if err != nil {
			return nil, fmt.Errorf("retain %s task %d: retained checkpoint %d: %w", r.job, r.task, id, err)
		}
		refs[folders[id].manifest] = files
		for _, f := range files {
			live[f] = true
		}
	}
	protected := make(map[ID]bool, len(inProgress))
	sharedOK := true
	for _, id := range inProgress {
		protected[id] = true
		if id <= newest {
			sharedOK = false
		}
	}

	var drop []ID
	for id := range folders {
		if id < oldest && !protected[id] {
			drop = append(drop, id)
		}
	}
	slices.Sort(drop)
	dropped := make(map[string]bool) // referenced by a manifest deleted here
	var manifests, rest []string
	for _, id := range drop {
		f := folders[id]
		if f.manifest != "" {
			manifests = append(manifests, f.manifest)
			if files, err := r.manifestRefs(ctx, f.manifest, id); err == nil {
				for _, name := range files {
					dropped[name] = true
				}
			} else {
				r.log.Warn("retention: cannot read a manifest it deletes; its shared files go on a later call", "checkpoint", id, "err", err)
			}
		}
		for _, name := range f.others {
			if !live[name] {
				rest = append(rest, name)
			}
		}
	}

	var doomed []string
	marks := make(map[string]bool)
	advanced := r.haveMark && newest > r.markedAt
	for _, name := range shared {
		switch {
		case live[name]:
		case !sharedOK:
			marks[name] = true
		case dropped[name], r.eagerSweep, advanced && r.marked[name]:
			doomed = append(doomed, name)
		default:
			marks[name] = true
		}
	}

	var mu sync.Mutex
	del := func(ctx context.Context, name string) error {
		if err := r.st.Delete(ctx, name); err != nil {
			return err
		}
		mu.Lock()
		deleted = append(deleted, name)
		mu.Unlock()
		return nil
	}
	// Manifests first: a checkpoint without its manifest is incomplete, and
	// nothing ever takes an incomplete checkpoint for a complete one.
	for _, batch := range [][]string{manifests, rest, doomed} {
		if err := ForEach(ctx, r.concurrency, batch, del); err != nil {
			slices.Sort(deleted)
			return deleted, fmt.Errorf("retain %s task %d: %w", r.job, r.task, err)
		}
	}
	r.marked, r.markedAt, r.haveMark = marks, newest, true
	r.refs = refs
	r.forgetTold(newest)
	slices.Sort(deleted)
	if len(deleted) > 0 {
		r.log.Info("retention deleted old checkpoint data",
			"checkpoint", newest, "retained_from", oldest,
			"checkpoints_deleted", len(drop), "shared_files_deleted", len(doomed), "objects", len(deleted))
	}
	return deleted, nil
}

// folder is what List shows of one checkpoint folder.
type folder struct {
	manifest string   // its name, or "" if the checkpoint is incomplete
	others   []string // every other object in it
}

// listFolders groups the task's objects by checkpoint folder. Names it
// cannot parse are left alone.
func (r *Retainer) listFolders(ctx context.Context) (map[ID]*folder, error) {
	prefix := tasksDir(r.job, r.task)
	names, err := r.st.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	folders := make(map[ID]*folder)
	for _, name := range names {
		id, rest, ok := parseCheckpointObject(r.job, r.task, name)
		if !ok {
			continue // not a name this package writes
		}
		f := folders[id]
		if f == nil {
			f = &folder{}
			folders[id] = f
		}
		if rest == manifestFile {
			f.manifest = name
		} else {
			f.others = append(f.others, name)
		}
	}
	return folders, nil
}

// manifestRefs returns the names of the files that checkpoint id's
// manifest, object name, references: from what the last call kept, else
// read from storage.
func (r *Retainer) manifestRefs(ctx context.Context, name string, id ID) ([]string, error) {
	if files, ok := r.refs[name]; ok {
		return files, nil
	}
	if files, ok := r.toldRefs(name, id); ok {
		return files, nil
	}
	m, err := ReadManifest(ctx, r.st, r.job, r.task, id)
	if err != nil {
		return nil, err
	}
	return stateFiles(m), nil
}

// stateFiles returns the names of the files m's operators' state
// references.
func stateFiles(m Manifest) []string {
	var files []string
	for _, op := range m.Operators {
		if op.State == nil {
			continue
		}
		for _, f := range op.State.Files {
			files = append(files, f.Name)
		}
	}
	return files
}
