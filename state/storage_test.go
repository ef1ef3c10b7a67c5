package state

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/weirstream/weir/checkpoint"
)

// fakeStorage is a map; limit, if set, caps an object's size the way the
// in-memory checkpoint storage does.
type fakeStorage struct {
	mu    sync.Mutex
	objs  map[string][]byte
	limit int
}

func newFakeStorage() *fakeStorage { return &fakeStorage{objs: map[string][]byte{}} }

func (s *fakeStorage) Put(ctx context.Context, name string, r io.Reader) error {
	var buf bytes.Buffer
	var src io.Reader = r
	if s.limit > 0 {
		src = io.LimitReader(r, int64(s.limit)+1)
	}
	if _, err := io.Copy(&buf, src); err != nil {
		return err
	}
	if s.limit > 0 && buf.Len() > s.limit {
		return fmt.Errorf("object %q exceeds the %d-byte limit of memory storage", name, s.limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objs[name] = buf.Bytes()
	return nil
}

func (s *fakeStorage) PutIfAbsent(ctx context.Context, name string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objs[name]; ok {
		return checkpoint.ErrExists
	}
	s.objs[name] = bytes.Clone(data)
	return nil
}

func (s *fakeStorage) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.objs[name]
	if !ok {
		return nil, checkpoint.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (s *fakeStorage) List(ctx context.Context, prefix string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.objs {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (s *fakeStorage) Delete(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objs, name)
	return nil
}

var _ checkpoint.Storage = (*fakeStorage)(nil)
