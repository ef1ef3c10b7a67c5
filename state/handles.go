package state

import (
	"fmt"
)

// Handles are declared once per operator, before processing (and before
// Restore), and then read and write the state of the scope's current key.
// They return errors and never panic; a handle is used from its operator's
// goroutine only.

type encoder[T any] struct {
	c       Codec[T]
	checked CheckedCodec[T] // c, if its encoding can fail
}

func newEncoder[T any](c Codec[T]) encoder[T] {
	e := encoder[T]{c: c}
	e.checked, _ = c.(CheckedCodec[T])
	return e
}

// Encode appends c's encoding of v to dst, with AppendChecked if c has it.
func Encode[T any](c Codec[T], dst []byte, v T) ([]byte, error) { return newEncoder(c).append(dst, v) }

func (e encoder[T]) append(dst []byte, v T) ([]byte, error) {
	if e.checked != nil {
		return e.checked.AppendChecked(dst, v)
	}
	return e.c.Append(dst, v), nil
}

type handle struct {
	name  string
	scope *KeyScope
}

func (h *handle) key() ([]byte, error) {
	k := h.scope.Key()
	if k == nil {
		return nil, fmt.Errorf("state %q: no current key (keyed state used outside a keyed context)", h.name)
	}
	return k, nil
}

func (h *handle) wrap(op string, err error) error {
	return fmt.Errorf("state %q: %s: %w", h.name, op, err)
}

// newHandle checks a declaration and records it in scope: kind, then the
// names of the codecs cs.
func newHandle(b Backend, scope *KeyScope, name string, kind string, cs ...any) (handle, error) {
	switch {
	case b == nil:
		return handle{}, fmt.Errorf("state %q: nil backend", name)
	case scope == nil:
		return handle{}, fmt.Errorf("state %q: nil key scope", name)
	}
	what := kind
	for _, c := range cs {
		if c == nil {
			return handle{}, fmt.Errorf("state %q: nil codec", name)
		}
		what += " " + CodecName(c)
	}
	scope.declare(name, what)
	return handle{name: name, scope: scope}, nil
}

// Value is one value of T per key.
type Value[T any] struct {
	handle
	t   ValueTable
	enc encoder[T]
	buf []byte
}

// NewValue declares value state name in b.
func NewValue[T any](b Backend, scope *KeyScope, name string, c Codec[T]) (*Value[T], error) {
	h, err := newHandle(b, scope, name, "value", c)
	if err != nil {
		return nil, err
	}
	t, err := b.Value(name)
	if err != nil {
		return nil, err
	}
	return &Value[T]{handle: h, t: t, enc: newEncoder(c)}, nil
}

// Get returns the current key's value and whether it is set.
func (v *Value[T]) Get() (T, bool, error) {
	var zero T
	k, err := v.key()
	if err != nil {
		return zero, false, err
	}
	b, ok, err := v.t.Get(k)
	if err != nil || !ok {
		if err != nil {
			err = v.wrap("get", err)
		}
		return zero, false, err
	}
	x, err := v.enc.c.Decode(b)
	if err != nil {
		return zero, false, v.wrap("get", err)
	}
	return x, true, nil
}

// Set sets the current key's value.
func (v *Value[T]) Set(x T) error {
	k, err := v.key()
	if err != nil {
		return err
	}
	v.buf, err = v.enc.append(v.buf[:0], x)
	if err != nil {
		return v.wrap("set", err)
	}
	if err := v.t.Put(k, v.buf); err != nil {
		return v.wrap("set", err)
	}
	return nil
}

// Clear removes the current key's value.
func (v *Value[T]) Clear() error {
	k, err := v.key()
	if err != nil {
		return err
	}
	if err := v.t.Delete(k); err != nil {
		return v.wrap("clear", err)
	}
	return nil
}

// List is a list of T per key. Add does not read the list.
type List[T any] struct {
	handle
	t   ListTable
	enc encoder[T]
	buf []byte
}

// NewList declares list state name in b.
func NewList[T any](b Backend, scope *KeyScope, name string, c Codec[T]) (*List[T], error) {
	h, err := newHandle(b, scope, name, "list", c)
	if err != nil {
		return nil, err
	}
	t, err := b.List(name)
	if err != nil {
		return nil, err
	}
	return &List[T]{handle: h, t: t, enc: newEncoder(c)}, nil
}

// Add appends x to the current key's list.
func (l *List[T]) Add(x T) error {
	k, err := l.key()
	if err != nil {
		return err
	}
	l.buf, err = l.enc.append(l.buf[:0], x)
	if err != nil {
		return l.wrap("add", err)
	}
	if err := l.t.Append(k, l.buf); err != nil {
		return l.wrap("add", err)
	}
	return nil
}

// Range calls fn for each element of the current key's list in the order they
// were added; an error from fn stops it and is returned as is.
func (l *List[T]) Range(fn func(T) error) error {
	k, err := l.key()
	if err != nil {
		return err
	}
	var fnErr error
	err = l.t.Iterate(k, func(b []byte) error {
		x, err := l.enc.c.Decode(b)
		if err != nil {
			return err
		}
		if err := fn(x); err != nil {
			fnErr = err
			return err
		}
		return nil
	})
	if err != nil && err != fnErr {
		return l.wrap("range", err)
	}
	return err
}

// All returns the current key's list (nil if empty).
func (l *List[T]) All() ([]T, error) {
	var out []T
	err := l.Range(func(x T) error {
		out = append(out, x)
		return nil
	})
	return out, err
}

// Clear removes the current key's list.
func (l *List[T]) Clear() error {
	k, err := l.key()
	if err != nil {
		return err
	}
	if err := l.t.Delete(k); err != nil {
		return l.wrap("clear", err)
	}
	return nil
}

// Map is a map from K to V per key. Range visits entries in the byte order of
// the encoded K: choose a codec whose encoding sorts like K where that order
// matters (Int64, Uint64, Float64 and String do).
type Map[K, V any] struct {
	handle
	t    MapTable
	kenc encoder[K]
	venc encoder[V]
	kbuf []byte
	vbuf []byte
}

// NewMap declares map state name in b.
func NewMap[K, V any](b Backend, scope *KeyScope, name string, kc Codec[K], vc Codec[V]) (*Map[K, V], error) {
	if vc == nil {
		return nil, fmt.Errorf("state %q: nil value codec", name)
	}
	h, err := newHandle(b, scope, name, "map", kc, vc)
	if err != nil {
		return nil, err
	}
	t, err := b.Map(name)
	if err != nil {
		return nil, err
	}
	return &Map[K, V]{handle: h, t: t, kenc: newEncoder(kc), venc: newEncoder(vc)}, nil
}

func (m *Map[K, V]) userKey(op string, uk K) (key, ukb []byte, err error) {
	if key, err = m.key(); err != nil {
		return nil, nil, err
	}
	if m.kbuf, err = m.kenc.append(m.kbuf[:0], uk); err != nil {
		return nil, nil, m.wrap(op, err)
	}
	return key, m.kbuf, nil
}

// Get returns the value of uk in the current key's map and whether it is set.
func (m *Map[K, V]) Get(uk K) (V, bool, error) {
	var zero V
	key, ukb, err := m.userKey("get", uk)
	if err != nil {
		return zero, false, err
	}
	b, ok, err := m.t.Get(key, ukb)
	if err != nil || !ok {
		if err != nil {
			err = m.wrap("get", err)
		}
		return zero, false, err
	}
	v, err := m.venc.c.Decode(b)
	if err != nil {
		return zero, false, m.wrap("get", err)
	}
	return v, true, nil
}

// Put sets uk to v in the current key's map.
func (m *Map[K, V]) Put(uk K, v V) error {
	key, ukb, err := m.userKey("put", uk)
	if err != nil {
		return err
	}
	if m.vbuf, err = m.venc.append(m.vbuf[:0], v); err != nil {
		return m.wrap("put", err)
	}
	if err := m.t.Put(key, ukb, m.vbuf); err != nil {
		return m.wrap("put", err)
	}
	return nil
}

// Delete removes uk from the current key's map.
func (m *Map[K, V]) Delete(uk K) error {
	key, ukb, err := m.userKey("delete", uk)
	if err != nil {
		return err
	}
	if err := m.t.Delete(key, ukb); err != nil {
		return m.wrap("delete", err)
	}
	return nil
}

// Range calls fn for each entry of the current key's map in encoded-key byte
// order; an error from fn stops it and is returned as is.
func (m *Map[K, V]) Range(fn func(K, V) error) error {
	key, err := m.key()
	if err != nil {
		return err
	}
	var fnErr error
	err = m.t.Iterate(key, func(ukb, vb []byte) error {
		uk, err := m.kenc.c.Decode(ukb)
		if err != nil {
			return err
		}
		v, err := m.venc.c.Decode(vb)
		if err != nil {
			return err
		}
		if err := fn(uk, v); err != nil {
			fnErr = err
			return err
		}
		return nil
	})
	if err != nil && err != fnErr {
		return m.wrap("range", err)
	}
	return err
}

// Clear removes the current key's whole map.
func (m *Map[K, V]) Clear() error {
	key, err := m.key()
	if err != nil {
		return err
	}
	if err := m.t.Clear(key); err != nil {
		return m.wrap("clear", err)
	}
	return nil
}
