package checkpoint

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// ForEach calls fn for every item with at most limit calls in flight
// (limit <= 0: no bound) and returns the first error. After an error it
// starts no further calls and cancels the context of those running. Storage
// implementations do not bound the parallelism of their callers: a state
// backend uploading or downloading many files goes through ForEach (or its
// own bound), so that one task does not open hundreds of connections.
func ForEach[T any](ctx context.Context, limit int, items []T, fn func(ctx context.Context, item T) error) error {
	g, gctx := errgroup.WithContext(ctx)
	if limit > 0 {
		g.SetLimit(limit)
	}
	for _, item := range items {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error { return fn(gctx, item) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}
