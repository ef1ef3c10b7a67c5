package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// DefaultMaxObjectSize is the memory storage's default limit on one object.
const DefaultMaxObjectSize = 5 << 20

// MemoryOptions configures a Memory storage.
type MemoryOptions struct {
	// MaxObjectSize bounds one object (for the memory state backend: one
	// state of one operator). 0: DefaultMaxObjectSize; negative: no limit.
	MaxObjectSize int64
}

// ObjectTooLargeError is returned by a Memory storage for an object over its
// size limit. State backends name objects after operator and state, so the
// message names the state that grew too big.
type ObjectTooLargeError struct {
	Name  string
	Size  int64
	Limit int64
}

func (e *ObjectTooLargeError) Error() string {
	return fmt.Sprintf("checkpoint: object %q is %d bytes, over the memory storage limit of %d bytes "+
		"(raise the limit or use file:// or s3:// checkpoint storage)", e.Name, e.Size, e.Limit)
}

// Memory is a Storage in process memory, for tests and demos: it is lost
// with the process. It is safe for concurrent use.
type Memory struct {
	limit   int64
	mu      sync.Mutex
	objects map[string][]byte // values are never modified once stored
}

var _ Storage = (*Memory)(nil)

// NewMemory returns an empty memory storage.
func NewMemory(opts MemoryOptions) *Memory {
	limit := opts.MaxObjectSize
	if limit == 0 {
		limit = DefaultMaxObjectSize
	}
	return &Memory{limit: limit, objects: make(map[string][]byte)}
}

// Put stores r's bytes under name. Over the limit it returns an
// *ObjectTooLargeError (having read r to the end, to report the size).
func (m *Memory) Put(ctx context.Context, name string, r io.Reader) error {
	if err := checkName(name); err != nil {
		return err
	}
	var buf bytes.Buffer
	src := r
	if m.limit >= 0 {
		src = io.LimitReader(r, m.limit+1)
	}
	if _, err := buf.ReadFrom(src); err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	if m.limit >= 0 && int64(buf.Len()) > m.limit {
		rest, err := io.Copy(io.Discard, r)
		if err != nil {
			return fmt.Errorf("put %s: %w", name, err)
		}
		return &ObjectTooLargeError{Name: name, Size: int64(buf.Len()) + rest, Limit: m.limit}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	m.mu.Lock()
	m.objects[name] = buf.Bytes()
	m.mu.Unlock()
	return nil
}

// PutIfAbsent stores data under name unless the name is taken (ErrExists).
func (m *Memory) PutIfAbsent(ctx context.Context, name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	if m.limit >= 0 && int64(len(data)) > m.limit {
		return &ObjectTooLargeError{Name: name, Size: int64(len(data)), Limit: m.limit}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objects[name]; ok {
		return fmt.Errorf("put %s: %w", name, ErrExists)
	}
	m.objects[name] = slices.Clone(data)
	return nil
}

// Get opens the object name, or returns ErrNotFound.
func (m *Memory) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", name, err)
	}
	m.mu.Lock()
	b, ok := m.objects[name]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("get %s: %w", name, ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// List returns the names under prefix, sorted.
func (m *Memory) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	m.mu.Lock()
	var names []string
	for name := range m.objects {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	m.mu.Unlock()
	slices.Sort(names)
	return names, nil
}

// Delete removes the object name; a missing object is not an error.
func (m *Memory) Delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	m.mu.Lock()
	delete(m.objects, name)
	m.mu.Unlock()
	return nil
}

// PrintableName says whether s is UTF-8 without control characters or
// the non-characters U+FFFE and U+FFFF: what every storage, S3 listing
// names in XML included, keeps as it is. Names of jobs, operators and
// states go into object names, and are checked with it.
func PrintableName(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == 0xFFFE || r == 0xFFFF {
			return false
		}
	}
	return true
}

// checkName refuses names that are not clean relative slash paths, so that
// every storage maps a name to the same single place.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("checkpoint: empty object name")
	}
	if strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") {
		return fmt.Errorf("checkpoint: object name %q: must be relative and not end in /", name)
	}
	for seg := range strings.SplitSeq(name, "/") {
		switch {
		case seg == "" || seg == "." || seg == "..":
			return fmt.Errorf("checkpoint: object name %q: empty, . or .. segment", name)
		case strings.HasPrefix(seg, tempPrefix):
			return fmt.Errorf("checkpoint: object name %q: segments starting with %q are reserved", name, tempPrefix)
		case strings.ContainsRune(seg, '\\') || strings.ContainsRune(seg, 0):
			return fmt.Errorf("checkpoint: object name %q: backslash or NUL", name)
		case !PrintableName(seg):
			// S3 lists names in XML, which has no place for them: a
			// server answers another name, and retention or a restore
			// would miss the object.
			return fmt.Errorf("checkpoint: object name %q: a control character, or not UTF-8", name)
		}
	}
	return nil
}
