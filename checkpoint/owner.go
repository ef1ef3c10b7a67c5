package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Ownership. A task has one owner at a time in the normal case, but a
// rebalance, a long pause or a network partition leaves the old owner
// running for a while next to the new one. Three things keep their writes
// apart:
//
//   - Every owner has a fencing epoch, unique and larger than that of every
//     owner before it (NextEpoch allocates them from storage, so they grow
//     across processes, restarts and a deleted consumer group).
//   - An owner writes the files of a checkpoint under OwnerDir, which
//     names its epoch and a fresh attempt id, and shared files under a
//     store instance id that is fresh each time a store is opened or
//     restored: no two owners ever write the same object, and the
//     manifest's conditional write stays the only thing they race on.
//   - An owner claims the task (Claim) before it restores: an older owner
//     that restarts the task later sees the claim and stops
//     (ErrSuperseded) instead of fencing the newer one.

// OwnerDir is the folder in checkpoint id's folder where one owner (epoch)
// and one attempt of it (a fresh id each time the task starts) write the
// files of that checkpoint only. It ends in "/".
func OwnerDir(job string, task int, id ID, epoch int64, attempt string) string {
	return CheckpointDir(job, task, id) + "e" + strconv.FormatInt(epoch, 10) + "-" + attempt + "/"
}

const claimPrefix = "owner-"

func claimName(job string, task int, epoch int64) string {
	return fmt.Sprintf("%s%s%020d", tasksDir(job, task), claimPrefix, epoch)
}

// Claim records that the owner with epoch takes the task. A claim that
// exists already (the same owner restarting the task) is not an error.
func Claim(ctx context.Context, st Storage, job string, task int, epoch int64) error {
	if epoch < 0 {
		return fmt.Errorf("claim task %d of %s: negative epoch %d", task, job, epoch)
	}
	body := fmt.Appendf(nil, "{\"epoch\":%d,\"time\":%q}\n", epoch, time.Now().UTC().Format(time.RFC3339Nano))
	err := st.PutIfAbsent(ctx, claimName(job, task, epoch), body)
	if err != nil && !errors.Is(err, ErrExists) {
		return fmt.Errorf("claim task %d of %s: %w", task, job, err)
	}
	return nil
}

// Claims returns the epochs of the task's claims, ascending.
func Claims(ctx context.Context, st Storage, job string, task int) ([]int64, error) {
	prefix := tasksDir(job, task)
	names, err := st.List(ctx, prefix+claimPrefix)
	if err != nil {
		return nil, fmt.Errorf("list claims of %s task %d: %w", job, task, err)
	}
	var epochs []int64
	for _, name := range names {
		digits, ok := strings.CutPrefix(name, prefix+claimPrefix)
		if !ok {
			continue
		}
		e, err := strconv.ParseInt(digits, 10, 64)
		if err != nil || claimName(job, task, e) != name {
			continue
		}
		epochs = append(epochs, e)
	}
	slices.Sort(epochs)
	return epochs, nil
}

// DropClaimsBelow deletes the task's claims with an epoch below epoch: the
// owner with epoch calls it once it has checked that no newer owner claimed
// the task, so that its own claim is the one an older owner sees.
func DropClaimsBelow(ctx context.Context, st Storage, job string, task int, epoch int64) error {
	epochs, err := Claims(ctx, st, job, task)
	if err != nil {
		return err
	}
	for _, e := range epochs {
		if e >= epoch {
			break
		}
		if err := st.Delete(ctx, claimName(job, task, e)); err != nil {
			return fmt.Errorf("drop claim %d of %s task %d: %w", e, job, task, err)
		}
	}
	return nil
}

// epochsKept is how long allocated epochs stay in storage. Only the
// newest matters, but an epoch that NextEpoch deleted could be allocated
// again by a caller that listed before the deletion and wrote after it; so
// an epoch is deleted only once it is older than any such caller can be.
const epochsKept = time.Hour

func epochsDir(job string) string { return job + "/epochs/" }

// epochClock is NextEpoch's clock; a test runs it minutes off.
var epochClock = time.Now

// NextEpoch allocates a fencing epoch for job: larger than every epoch
// NextEpoch returned before for the job (or RecordEpoch recorded), in any
// process, and at least the current time in Unix nanoseconds, so that
// epochs also compare with those of workers started before epochs were
// allocated. Concurrent callers get different epochs: each allocation is a
// conditional write of the epoch's own object.
func NextEpoch(ctx context.Context, st Storage, job string) (int64, error) {
	dir := epochsDir(job)
	for range 64 {
		names, err := st.List(ctx, dir)
		if err != nil {
			return 0, fmt.Errorf("allocate an epoch for %s: %w", job, err)
		}
		var have []int64
		for _, name := range names {
			e, err := strconv.ParseInt(strings.TrimPrefix(name, dir), 10, 64)
			if err == nil && fmt.Sprintf("%s%020d", dir, e) == name {
				have = append(have, e)
			}
		}
		slices.Sort(have)
		now := epochClock()
		next := now.UnixNano()
		if len(have) > 0 {
			last := have[len(have)-1]
			if last == math.MaxInt64 {
				// No epoch is larger: fencing cannot go on, and last+1
				// would wrap to the smallest.
				return 0, fmt.Errorf("allocate an epoch for %s: epoch %d in storage is the largest there is", job, last)
			}
			next = max(next, last+1)
		}
		err = st.PutIfAbsent(ctx, fmt.Sprintf("%s%020d", dir, next), []byte(now.UTC().Format(time.RFC3339Nano)+"\n"))
		if errors.Is(err, ErrExists) {
			continue // another caller took it: list again
		}
		if err != nil {
			return 0, fmt.Errorf("allocate an epoch for %s: %w", job, err)
		}
		// The write may have made again an epoch another caller got and a
		// third deleted meanwhile: the deletions below judge age by the
		// deleter's clock, which may be hours ahead. An epoch is deleted
		// only while a larger one exists, and the largest never is; so
		// none larger now means next was nobody's.
		switch larger, err := epochAbove(ctx, st, dir, next); {
		case err != nil:
			return 0, fmt.Errorf("allocate an epoch for %s: %w", job, err)
		case larger:
			continue
		}
		// Best effort: the newest object is what matters, and it stays.
		cutoff := now.Add(-epochsKept).UnixNano()
		for _, e := range have {
			if e >= cutoff || e == have[len(have)-1] {
				break
			}
			_ = st.Delete(ctx, fmt.Sprintf("%s%020d", dir, e))
		}
		return next, nil
	}
	return 0, fmt.Errorf("allocate an epoch for %s: too many concurrent allocations", job)
}

// epochAbove says whether dir holds an epoch larger than e.
func epochAbove(ctx context.Context, st Storage, dir string, e int64) (bool, error) {
	names, err := st.List(ctx, dir)
	if err != nil {
		return false, err
	}
	for _, name := range names {
		if n, err := strconv.ParseInt(strings.TrimPrefix(name, dir), 10, 64); err == nil && n > e {
			return true, nil
		}
	}
	return false, nil
}

// RecordEpoch records an epoch chosen by hand (a worker's --epoch), so
// that NextEpoch allocates above it from now on.
func RecordEpoch(ctx context.Context, st Storage, job string, epoch int64) error {
	err := st.PutIfAbsent(ctx, fmt.Sprintf("%s%020d", epochsDir(job), epoch), []byte(time.Now().UTC().Format(time.RFC3339Nano)+"\n"))
	if err != nil && !errors.Is(err, ErrExists) {
		return fmt.Errorf("record epoch %d of %s: %w", epoch, job, err)
	}
	return nil
}
