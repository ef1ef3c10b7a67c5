package checkpoint

import (
	"context"
	"errors"
	"io"
)

// ErrNotFound is returned by Storage.Get for a missing object.
var ErrNotFound = errors.New("checkpoint: object not found")

// ErrExists is returned by Storage.PutIfAbsent when the object exists already.
var ErrExists = errors.New("checkpoint: object exists")

// ErrSuperseded says a newer owner has the task: another worker wrote one
// of its checkpoints. The task must stop for good; restarting it would fence
// the new owner's transactions.
var ErrSuperseded = errors.New("task superseded by a newer owner")

// Storage holds checkpoint objects under a root (a directory, a bucket
// prefix). Names are slash-separated and relative to the root. Every write is
// atomic: an object is either absent or complete.
type Storage interface {
	// Put writes (or replaces) an object from r.
	Put(ctx context.Context, name string, r io.Reader) error
	// PutIfAbsent writes an object only if no object has that name, else it
	// returns ErrExists. Manifests are written with it.
	PutIfAbsent(ctx context.Context, name string, data []byte) error
	// Get opens an object; ErrNotFound if it does not exist.
	Get(ctx context.Context, name string) (io.ReadCloser, error)
	// List returns the names under prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes an object; deleting a missing object is not an error.
	Delete(ctx context.Context, name string) error
}
