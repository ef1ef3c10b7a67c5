package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/weirstream/weir/checkpoint"
)

// MemoryOptions configure the memory backend.
type MemoryOptions struct {
	// ExpectedKeys presizes every table for that many keys, which saves the
	// rehashes of a growing table (each one a pause proportional to its size).
	// 0 starts small.
	ExpectedKeys int
}

// NewMemory returns a Factory of memory backends.
func NewMemory(opts MemoryOptions) Factory {
	return func(task int, operator, dir string) (Backend, error) {
		return OpenMemory(opts), nil
	}
}

// Memory keeps state in Go memory and snapshots it in full at each
// checkpoint, copy-on-write (see clock): Snapshot costs a copy of a few slices
// of chunk pointers, and the first write to a chunk after it serialises the
// chunk for the upload, or copies it (see chunkClaims). Upload serialises the
// rest of each table into one object, dir + table name.
type Memory struct {
	opts   MemoryOptions
	clk    *clock
	tables map[string]memTable
	// order holds the tables in the order they were declared, for Prefetch
	// to walk without iterating a map.
	order  []memTable
	closed bool
	sink   uint32 // keeps the loads of Prefetch
}

// OpenMemory opens an empty memory backend.
func OpenMemory(opts MemoryOptions) *Memory {
	return &Memory{opts: opts, clk: newClock(), tables: map[string]memTable{}}
}

// ErrClosed is returned by a closed backend.
var ErrClosed = errors.New("state: backend closed")

// Name implements Backend.
func (m *Memory) Name() string { return "memory" }

func (m *Memory) declare(name string, kind tableKind) (memTable, error) {
	if m.closed {
		return nil, ErrClosed
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	if t, ok := m.tables[name]; ok {
		if t.kind() != kind {
			return nil, fmt.Errorf("state: %q is declared as %s state, not %s", name, t.kind(), kind)
		}
		return t, nil
	}
	t := m.newTable(name, kind, m.opts.ExpectedKeys)
	m.tables[name] = t
	m.order = append(m.order, t)
	return t, nil
}

func (m *Memory) newTable(name string, kind tableKind, hint int) memTable {
	switch kind {
	case kindValue:
		return &memValue{name: name, m: newValueMap(m.clk, hint)}
	case kindList:
		return &memList{name: name, m: newValueMap(m.clk, hint)}
	default:
		return newMemMap(name, m.clk, hint)
	}
}

// Value implements Backend.
func (m *Memory) Value(name string) (ValueTable, error) {
	t, err := m.declare(name, kindValue)
	if err != nil {
		return nil, err
	}
	return t.(*memValue), nil
}

// List implements Backend.
func (m *Memory) List(name string) (ListTable, error) {
	t, err := m.declare(name, kindList)
	if err != nil {
		return nil, err
	}
	return t.(*memList), nil
}

// Map implements Backend.
func (m *Memory) Map(name string) (MapTable, error) {
	t, err := m.declare(name, kindMap)
	if err != nil {
		return nil, err
	}
	return t.(*memMap), nil
}

// Snapshot implements Backend. It copies no state: it bumps the clock and
// keeps each table's slice of chunk pointers (8 bytes per 256 slots).
func (m *Memory) Snapshot(id checkpoint.ID) (Snapshot, error) {
	if m.closed {
		return nil, ErrClosed
	}
	ver, alone := m.clk.take()
	s := &memSnapshot{clk: m.clk, id: id, ver: ver}
	s.names = make([]string, 0, len(m.tables))
	for name := range m.tables {
		s.names = append(s.names, name)
	}
	slices.Sort(s.names)
	s.kinds = make([]tableKind, len(s.names))
	s.views = make([]tableView, len(s.names))
	s.claims = make([]*chunkClaims, len(s.names))
	for i, name := range s.names {
		t := m.tables[name]
		s.kinds[i], s.views[i] = t.kind(), t.view()
		// With another snapshot live, a chunk may be shared by both, and only
		// a copy keeps each one's view: no claims then, for any table.
		var c *chunkClaims
		if alone {
			c = newChunkClaims(s.views[i])
		}
		t.index().claims, s.claims[i] = c, c
	}
	return s, nil
}

// Close implements Backend. Outstanding snapshots stay valid.
func (m *Memory) Close() error {
	m.closed = true
	m.tables = nil
	m.order = nil
	return nil
}

type memSnapshot struct {
	clk      *clock
	id       checkpoint.ID
	ver      uint32
	names    []string
	kinds    []tableKind
	views    []tableView
	claims   []*chunkClaims // nil entries if the snapshot was not alone
	once     sync.Once
	released atomic.Bool
	uploaded atomic.Bool
}

// Upload implements Snapshot: one object per table, dir + table name, in the
// format of format.go. shared is unused: a memory snapshot is always full.
func (s *memSnapshot) Upload(ctx context.Context, st checkpoint.Storage, dir, shared string) (checkpoint.StateHandle, error) {
	h := checkpoint.StateHandle{Backend: "memory"}
	if s.released.Load() {
		return h, fmt.Errorf("state: upload snapshot of checkpoint %d after release", s.id)
	}
	// The first upload consumes the chunks the owner serialised (see
	// chunkClaims): a second one would write files without them.
	if s.uploaded.Swap(true) {
		return h, fmt.Errorf("state: snapshot of checkpoint %d uploaded twice", s.id)
	}
	for i, name := range s.names {
		obj := dir + name
		ref, err := checkpoint.PutFile(ctx, st, obj, newTableReader(name, s.kinds[i], s.views[i], s.claims[i]))
		if err != nil {
			return checkpoint.StateHandle{}, fmt.Errorf("state: upload %q of checkpoint %d: %w", obj, s.id, err)
		}
		ref.Local = name
		h.Files = append(h.Files, ref)
		h.Size += ref.Size
	}
	h.Incremental = h.Size
	return h, nil
}

// Release implements Snapshot; it may run on any goroutine, more than once.
func (s *memSnapshot) Release() {
	s.once.Do(func() {
		s.released.Store(true)
		s.views = nil
		for _, c := range s.claims {
			if c != nil {
				c.drop()
			}
		}
		s.clk.release(s.ver)
	})
}

// Restore implements Backend. It verifies and decodes every file before it
// changes anything, so a failed restore leaves the state as it was. Declared
// tables without a file end up empty; files of undeclared tables declare them.
func (m *Memory) Restore(ctx context.Context, st checkpoint.Storage, handle checkpoint.StateHandle) error {
	if m.closed {
		return ErrClosed
	}
	if handle.Backend != "memory" {
		return fmt.Errorf("state: restore a %q snapshot into the memory backend", handle.Backend)
	}
	fresh := make(map[string]memTable, len(handle.Files))
	for _, f := range handle.Files {
		data, err := readVerified(ctx, st, f)
		if err != nil {
			return fmt.Errorf("state: restore: %w", err)
		}
		t, err := m.decodeTable(f.Local, data)
		if err != nil {
			return fmt.Errorf("state: restore %q: %w", f.Name, err)
		}
		if old, ok := m.tables[f.Local]; ok && old.kind() != t.kind() {
			return fmt.Errorf("state: restore %q: %q is %s state here, %s in the snapshot", f.Name, f.Local, old.kind(), t.kind())
		}
		if _, dup := fresh[f.Local]; dup {
			return fmt.Errorf("state: restore: two files for state %q", f.Local)
		}
		fresh[f.Local] = t
	}
	for name, t := range m.tables {
		if _, ok := fresh[name]; !ok {
			t.reset()
		}
	}
	for name, nt := range fresh {
		t, ok := m.tables[name]
		if !ok {
			m.tables[name] = nt
			m.order = append(m.order, nt)
			continue
		}
		// Keep the declared table object: handles hold it.
		switch t := t.(type) {
		case *memValue:
			t.m = nt.(*memValue).m
		case *memList:
			t.m = nt.(*memList).m
		case *memMap:
			n := nt.(*memMap)
			t.idx, t.objs = n.idx, n.objs
		}
	}
	return nil
}
