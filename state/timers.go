package state

import (
	"container/heap"
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Timers are processing-time timers of a keyed operator. Each is a (key, time)
// pair persisted in a MapTable (key: the user key; user key: the time as 8
// big-endian bytes of Unix nanoseconds), so that it is part of every snapshot,
// and indexed in memory by a min-heap for firing. After Restore, call Rebuild.
//
// The heap may hold entries for timers deleted since they were pushed;
// live, the set of registered timers, is the truth, and firing skips what
// it no longer holds. live mirrors the table, so that registering a timer
// that exists (once per record, for a window) reads nothing from the
// backend.
type Timers struct {
	name  string
	scope *KeyScope
	t     MapTable
	h     timerHeap
	live  map[string]struct{} // key + the 8 bytes of the time
	tsBuf [8]byte
	idBuf []byte
}

// NewTimers declares the timers named name in b.
func NewTimers(b Backend, scope *KeyScope, name string) (*Timers, error) {
	if _, err := newHandle(b, scope, name, "timers"); err != nil {
		return nil, err
	}
	t, err := b.Map(name)
	if err != nil {
		return nil, err
	}
	return &Timers{name: name, scope: scope, t: t, live: map[string]struct{}{}}, nil
}

// id is the timer's entry in live; valid until the next call.
func (t *Timers) id(key []byte, ts int64) []byte {
	t.idBuf = binary.BigEndian.AppendUint64(append(t.idBuf[:0], key...), uint64(ts))
	return t.idBuf
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

// maxTimerTime is the latest time a timer holds: timers keep Unix
// nanoseconds.
var maxTimerTime = time.Unix(0, math.MaxInt64)

func (t *Timers) encode(ts time.Time) ([]byte, int64, error) {
	switch {
	case ts.Before(time.Unix(0, 0)):
		return nil, 0, fmt.Errorf("timers %q: time %v is before 1970", t.name, ts)
	case ts.After(maxTimerTime):
		// UnixNano would wrap around.
		return nil, 0, fmt.Errorf("timers %q: time %v is past %v, the latest a timer holds", t.name, ts, maxTimerTime.UTC())
	}
	n := ts.UnixNano()
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
	if _, ok := t.live[string(t.id(key, n))]; ok {
		return nil
	}
	if err := t.t.Put(key, ub, nil); err != nil {
		return fmt.Errorf("timers %q: register: %w", t.name, err)
	}
	t.live[string(t.id(key, n))] = struct{}{}
	heap.Push(&t.h, timer{ts: n, key: append([]byte(nil), key...)})
	return nil
}

// Delete removes the current key's timer at ts, if any.
func (t *Timers) Delete(ts time.Time) error {
	key, err := t.current()
	if err != nil {
		return err
	}
	ub, n, err := t.encode(ts)
	if err != nil {
		return err
	}
	id := t.id(key, n)
	if _, ok := t.live[string(id)]; !ok {
		return nil
	}
	if err := t.t.Delete(key, ub); err != nil {
		return fmt.Errorf("timers %q: delete: %w", t.name, err)
	}
	delete(t.live, string(id))
	return nil
}

// popDead drops heap entries of deleted timers until the top is a
// registered one.
func (t *Timers) popDead() error {
	for len(t.h) > 0 {
		top := t.h[0]
		if _, ok := t.live[string(t.id(top.key, top.ts))]; ok {
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
	var limit int64 // now as Unix nanoseconds, within what timers hold
	switch {
	case now.After(maxTimerTime):
		limit = math.MaxInt64
	case now.Before(time.Unix(0, 0)):
		limit = -1
	default:
		limit = now.UnixNano()
	}
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
		delete(t.live, string(t.id(top.key, top.ts)))
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
	live := map[string]struct{}{}
	err := t.t.Scan(func(key, ub, _ []byte) error {
		if len(ub) != 8 {
			return fmt.Errorf("timers %q: bad timer entry of %d bytes", t.name, len(ub))
		}
		tm := timer{ts: int64(binary.BigEndian.Uint64(ub)), key: append([]byte(nil), key...)}
		h = append(h, tm)
		live[string(t.id(tm.key, tm.ts))] = struct{}{}
		return nil
	})
	if err != nil {
		return fmt.Errorf("timers %q: rebuild: %w", t.name, err)
	}
	heap.Init(&h)
	t.h, t.live = h, live
	return nil
}
