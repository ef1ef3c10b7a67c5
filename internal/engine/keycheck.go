package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/weirstream/weir/internal/partition"
)

// The keyed invariant (DESIGN.md): a keyed operator only ever sees keys
// that the input's partitioner sends to its task. KeyBy does not move
// records, so every KeyBy declares that its key is where the input's
// producers put the record, and that declaration is checked per record,
// before the record touches state: its key codec's bytes (the record key's
// bytes, as one serde makes both in Kafka Streams) hashed by the input's
// partitioner must give the task's partition. A key of another task is a
// bad record, never a second, partial state for the key. LocalKeyBy opts
// out, for state per key per task on purpose.

// Partitioner says which partition a producer puts a record key in: the
// partitioner of the producers of a job's input (Config.Partitioner).
// Its methods are called from the tasks' goroutines at once.
type Partitioner interface {
	// Partition is the partition of key among n > 0.
	Partition(key []byte, n int) int
	// String names it in errors.
	String() string
}

// BadRecords takes the records a task sets aside instead of failing on
// them: a worker writes them to its dead-letter topic. Its methods are
// called from the tasks' goroutines at once, and may block: the task waits.
type BadRecords interface {
	// MisKeyed is called with a record whose key belongs to another task
	// (err says which and why), before it touches state. The record's
	// value is not at hand (operators upstream may have changed it); pos
	// says where it came from and key is the key codec's bytes. A nil
	// return means the record is set aside for good (for Kafka: the
	// dead-letter topic acknowledged it), and the task goes on without
	// it; an error fails the task, as err would without BadRecords.
	MisKeyed(ctx context.Context, info TaskInfo, pos Position, key []byte, err *MisKeyedError) error
}

// ErrMisKeyed is wrapped by every MisKeyedError. It fails a task for good:
// the record fails every restart the same way.
var ErrMisKeyed = errors.New("record keyed by a key of another task")

// MisKeyedError is a record whose key the input's partitioner sends to
// another task than the one that read it. The job's KeyBy declares that
// the input is partitioned by that key, and the input says otherwise:
// processing the record would give its key a second, partial state in
// this task.
type MisKeyedError struct {
	Job      string
	Operator string // the keyed operator
	KeyBy    string // the KeyBy that declared the key
	Position Position
	// Key is the key as the key function returned it (a string quoted),
	// KeyBytes its key codec's encoding, which the partitioner hashed.
	Key      string
	KeyBytes []byte
	// Task is the task the record is in; Owner the task (partition) that
	// Partitioner sends the key to, of Partitions.
	Task, Owner, Partitions int
	Partitioner             string
}

func (e *MisKeyedError) Error() string {
	what := "record " + e.Position.String()
	if e.Position.Emitted() {
		what = "a record " + e.Position.String() + " (its timer or window: no input record)"
	}
	return fmt.Sprintf("%v: job %s operator %s, %s: key %s (bytes %s) belongs to task %d, not task %d "+
		"(%s puts it in partition %d of %d). KeyByPartitioned %s declares that the input is partitioned by this key, and this record is not: "+
		"key by the Kafka record key (or a field its producers use as the record key, encoded as they encode it), "+
		"move the records to the task of their key with stream.KeyBy, "+
		"or use stream.LocalKeyBy for state per key per task on purpose; "+
		"if the input's producers use another partitioner, say which (--partitioner)",
		ErrMisKeyed, e.Job, e.Operator, what, e.Key, quoteKey(e.KeyBytes), e.Owner, e.Task,
		e.Partitioner, e.Owner, e.Partitions, e.KeyBy)
}

func (e *MisKeyedError) Unwrap() error { return ErrMisKeyed }

// maxKeyShown bounds how much of a key an error shows.
const maxKeyShown = 64

// quoteKey is key as a Go string literal, its first maxKeyShown bytes.
func quoteKey(key []byte) string {
	if len(key) > maxKeyShown {
		return strconv.Quote(string(key[:maxKeyShown])) + "..."
	}
	return strconv.Quote(string(key))
}

// showKey is a key function's result for an error, bounded: a string
// quoted, anything else as %v prints it.
func showKey(k any) string {
	var s string
	switch k := k.(type) {
	case string:
		s = strconv.Quote(k)
	case []byte:
		s = quoteKey(k)
	default:
		s = fmt.Sprintf("%v", k)
	}
	if len(s) > 2*maxKeyShown {
		return s[:2*maxKeyShown] + "..."
	}
	return s
}

// keyGuard is the check of one keyed input of an operator.
type keyGuard struct {
	keyBy   string // the KeyBy's name, for errors
	checked bool   // Config.Partitions > 0, and not a LocalKeyBy
}

// guard is the check of k's records in task t.
func (k *Keyed[K, T]) guard(t *task) keyGuard {
	return keyGuard{keyBy: k.name, checked: t.cfg.Partitions > 0 && !k.local}
}

// keyCheck is what a keyed operator checks keys with: the input's layout
// and partitioner, and where bad records go.
type keyCheck struct {
	partitions  int
	partitioner Partitioner
	bad         BadRecords
	// info is the operator's TaskInfo for BadRecords, made on first use.
	info *TaskInfo
}

func (k *keyedState) initKeyCheck(t *task) {
	k.check = keyCheck{partitions: t.cfg.Partitions, partitioner: t.cfg.Partitioner, bad: t.cfg.BadRecords}
}

// checkKey checks the key of the record at hand, typed as the key function
// returned it and encoded by the key codec as key. It returns true if the
// record belongs to the task (or g does not check); false and nil if it
// does not and BadRecords set it aside: skip it; false and the error to
// fail the task with otherwise.
func checkKey[K any](k *keyedState, g *keyGuard, key []byte, typed K) (bool, error) {
	if !g.checked {
		return true, nil
	}
	c := &k.check
	owner := c.partitioner.Partition(key, c.partitions)
	if owner == k.t.id {
		return true, nil
	}
	return false, k.misKeyed(g, key, showKey(typed), owner)
}

// misKeyed handles a record whose key belongs to task owner: BadRecords
// takes it, or it fails the task.
func (k *keyedState) misKeyed(g *keyGuard, key []byte, shown string, owner int) error {
	c := &k.check
	err := &MisKeyedError{
		Job: k.t.job, Operator: k.name, KeyBy: g.keyBy, Position: *k.cursor,
		Key: shown, KeyBytes: append([]byte(nil), key...),
		Task: k.t.id, Owner: owner, Partitions: c.partitions, Partitioner: c.partitioner.String(),
	}
	if c.bad == nil || err.Position.Emitted() {
		// Emitted by an operator's timer or window: no input record to set
		// aside, and a bug of the job's, not bad input.
		return err
	}
	if c.info == nil {
		info := k.t.info(k.name)
		c.info = &info
	}
	return c.bad.MisKeyed(k.t.ctx, *c.info, err.Position, err.KeyBytes, err)
}

// defaultPartitioner is Kafka's own, the Java client's and franz-go's.
var defaultPartitioner Partitioner = partition.Murmur2
