package state

import (
	"container/heap"
	"encoding/binary"
	"fmt"
	"time"
)

// Timers are processing-time timers of a keyed operator. Each is a (key, time)
// pair persisted in a MapTable (key: the user key; user key: the time as 8
// big-endian bytes of Unix nanoseconds), so that it is part of every snapshot,
// and indexed in memory by a min-heap for firing. After Restore, call Rebuild.
//
// The heap may hold entries for timers deleted since they were pushed; the
// table is the truth, and firing skips what it no longer holds.
type Timers struct {
	name  string
	scope *KeyScope
	t     MapTable
	h     timerHeap
	tsBuf [8]byte
}

// NewTimers declares the timers named name in b.
func NewTimers(b Backend, scope *KeyScope, name string) (*Timers, error) {
	if _, err := newHandle(b, scope, name, struct{}{}); err != nil {
		return nil, err
	}
	t, err := b.Map(name)
	if err != nil {
		return nil, err
	}
	return &Timers{name: name, scope: scope, t: t}, nil
}

type timer struct {
	ts  int64
	key []byte
}

type timerHeap []timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].ts != h[j].ts {
		return h[i].ts < h[j].ts
	}
	return string(h[i].key) < string(h[j].key)
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = timer{}
	*h = old[:len(old)-1]
	return x
}

func (t *Timers) encode(ts time.Time) ([]byte, int64, error) {
	n := ts.UnixNano()
	if n < 0 {
		return nil, 0, fmt.Errorf("timers %q: time %v is before 1970", t.name, ts)
	}
	binary.BigEndian.PutUint64(t.tsBuf[:], uint64(n))
	return t.tsBuf[:], n, nil
}

func (t *Timers) current() ([]byte, error) {
	k := t.scope.Key()
	if k == nil {
		return nil, fmt.Errorf("timers %q: no current key (keyed timers used outside a keyed context)", t.name)
	}
	return k, nil
}

// Register sets a timer for the current key at ts. Registering the same key
// and time again is a no-op.
func (t *Timers) Register(ts time.Time) error {
	key, err := t.current()
	if err != nil {
		return err
	}
	ub, n, err := t.encode(ts)
	if err != nil {
		return err
	}
	_, ok, err := t.t.Get(key, ub)
	if err != nil {
		return fmt.Errorf("timers %q: register: %w", t.name, err)
	}
	if ok {
		return nil
	}
	if err := t.t.Put(key, ub, nil); err != nil {
		return fmt.Errorf("timers %q: register: %w", t.name, err)
	}
	heap.Push(&t.h, timer{ts: n, key: append([]byte(nil), key...)})
	return nil
}

// Delete removes the current key's timer at ts, if any.
func (t *Timers) Delete(ts time.Time) error {
	key, err := t.current()
	if err != nil {
		return err
	}
	ub, _, err := t.encode(ts)
	if err != nil {
		return err
	}
	if err := t.t.Delete(key, ub); err != nil {
		return fmt.Errorf("timers %q: delete: %w", t.name, err)
	}
	return nil
}

// popDead drops heap entries of timers deleted from the table until the top
// is a registered timer.
func (t *Timers) popDead() error {
	for len(t.h) > 0 {
		top := t.h[0]
		binary.BigEndian.PutUint64(t.tsBuf[:], uint64(top.ts))
		_, ok, err := t.t.Get(top.key, t.tsBuf[:])
		if err != nil {
			return fmt.Errorf("timers %q: %w", t.name, err)
		}
		if ok {
			return nil
		}
		heap.Pop(&t.h)
	}
	return nil
}

// Next returns the earliest registered timer's time.
func (t *Timers) Next() (time.Time, bool) {
	if err := t.popDead(); err != nil || len(t.h) == 0 {
		// On a backend error, report the top as is: FireDue will surface
		// the error.
		if len(t.h) > 0 {
			return time.Unix(0, t.h[0].ts), true
		}
		return time.Time{}, false
	}
	return time.Unix(0, t.h[0].ts), true
}

// FireDue fires, in time order (then key byte order), every timer at or before
// now: it removes the timer, sets the scope to the timer's key and calls fn.
// fn may register timers; those due fire in the same call. The scope's key is
// restored afterwards. An error from fn stops firing and is returned; the
// timer that fn failed on is already removed.
func (t *Timers) FireDue(now time.Time, fn func(ts time.Time) error) error {
	prev := t.scope.Key()
	defer t.scope.Set(prev)
	limit := now.UnixNano()
	for {
		if err := t.popDead(); err != nil {
			return err
		}
		if len(t.h) == 0 || t.h[0].ts > limit {
			return nil
		}
		top := heap.Pop(&t.h).(timer)
		binary.BigEndian.PutUint64(t.tsBuf[:], uint64(top.ts))
		if err := t.t.Delete(top.key, t.tsBuf[:]); err != nil {
			return fmt.Errorf("timers %q: fire: %w", t.name, err)
		}
		t.scope.Set(top.key)
		if err := fn(time.Unix(0, top.ts)); err != nil {
			return err
		}
	}
}

// Rebuild reloads the in-memory index from the table; call it after the
// backend's Restore.
func (t *Timers) Rebuild() error {
	h := timerHeap{}
	err := t.t.Scan(func(key, ub, _ []byte) error {
		if len(ub) != 8 {
			return fmt.Errorf("timers %q: bad timer entry of %d bytes", t.name, len(ub))
		}
		h = append(h, timer{ts: int64(binary.BigEndian.Uint64(ub)), key: append([]byte(nil), key...)})
		return nil
	})
	if err != nil {
		return fmt.Errorf("timers %q: rebuild: %w", t.name, err)
	}
	heap.Init(&h)
	t.h = h
	return nil
}
