package state

import (
	"context"

	"github.com/weirstream/weir/checkpoint"
)

// Byte slices returned by tables are owned by the backend: they stay valid
// until the next call into the same backend and must not be modified. Slices
// passed in may be reused by the caller once the call returns.

// ValueTable maps a key to one value.
type ValueTable interface {
	Get(key []byte) (value []byte, ok bool, err error)
	Put(key, value []byte) error
	Delete(key []byte) error
}

// ListTable maps a key to a list of values. Append does not read the list
// (a merge in Pebble), so appending to a long list costs the same as to a
// short one.
type ListTable interface {
	Append(key, value []byte) error
	// Iterate calls fn for each value in append order; an error from fn stops
	// the iteration and is returned.
	Iterate(key []byte, fn func(value []byte) error) error
	Delete(key []byte) error
}

// MapTable maps a key to a map of user keys to values.
type MapTable interface {
	Get(key, userKey []byte) (value []byte, ok bool, err error)
	Put(key, userKey, value []byte) error
	Delete(key, userKey []byte) error
	// Iterate calls fn for each entry of key's map in user-key byte order.
	Iterate(key []byte, fn func(userKey, value []byte) error) error
	// Clear removes key's whole map.
	Clear(key []byte) error
	// Scan calls fn for every entry of every key, in (key, userKey) byte
	// order; restores use it to rebuild in-memory indexes such as timers.
	Scan(fn func(key, userKey, value []byte) error) error
}

// Backend stores the keyed state of one operator of one task.
type Backend interface {
	// Name is the backend's kind as written in state handles ("memory").
	Name() string
	// Value, List and Map declare a table (or return the declared one). Names
	// are unique per backend across kinds.
	Value(name string) (ValueTable, error)
	List(name string) (ListTable, error)
	Map(name string) (MapTable, error)
	// Snapshot takes the synchronous part of a snapshot for checkpoint id:
	// what it returns reflects exactly the writes made before the call, and
	// writes made after it do not change it. It must be cheap.
	Snapshot(id checkpoint.ID) (Snapshot, error)
	// Restore replaces all state with the snapshot described by handle.
	Restore(ctx context.Context, st checkpoint.Storage, handle checkpoint.StateHandle) error
	Close() error
}

// Snapshot is the asynchronous part of a snapshot.
type Snapshot interface {
	// Upload writes the snapshot into st: files of this checkpoint only under
	// dir, immutable files that later checkpoints may share under shared. It
	// runs concurrently with processing.
	Upload(ctx context.Context, st checkpoint.Storage, dir, shared string) (checkpoint.StateHandle, error)
	// Release frees what the snapshot holds; call it after Upload or instead.
	Release()
}

// Factory opens the backend of one keyed operator of one task. dir is a
// local directory the backend may use (Pebble keeps its DB there, and leaves
// it there at Close for the next backend in dir to reuse its files: the
// caller deletes dir when the task will not come back).
type Factory func(task int, operator, dir string) (Backend, error)
