package checkpoint

import (
	"context"
	"fmt"
	"strings"
)

// Open returns the checkpoint storage a URI names:
//
//	memory, memory://   a fresh Memory storage with default options
//	file:///abs/path    a File storage at /abs/path
//	file://rel/path     a File storage at rel/path, relative to the working directory
//	s3://bucket/prefix  an S3 storage (settings in the query: S3OptionsFromURI)
func Open(ctx context.Context, uri string) (Storage, error) {
	switch {
	case uri == "memory" || uri == "memory://":
		return NewMemory(MemoryOptions{}), nil
	case strings.HasPrefix(uri, "file://"):
		dir := strings.TrimPrefix(uri, "file://")
		if dir == "" {
			return nil, fmt.Errorf("checkpoint storage %q: file:// needs a path, as in file:///var/lib/weir", uri)
		}
		st, err := NewFile(dir)
		if err != nil {
			return nil, fmt.Errorf("checkpoint storage %q: %w", uri, err)
		}
		return st, nil
	case strings.HasPrefix(uri, "s3://"):
		opts, err := S3OptionsFromURI(uri)
		if err != nil {
			return nil, err
		}
		st, err := NewS3(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("checkpoint storage %q: %w", uri, err)
		}
		return st, nil
	default:
		return nil, fmt.Errorf("checkpoint storage %q: unknown scheme; want memory, file://PATH or s3://BUCKET/PREFIX", uri)
	}
}
