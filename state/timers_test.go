package state

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

func timeAt(sec int64) time.Time { return time.Unix(sec, 0) }

type firing struct {
	key string
	sec int64
}

func fireAll(t *testing.T, tm *Timers, scope *KeyScope, now int64, then func(f firing) error) []firing {
	t.Helper()
	var got []firing
	err := tm.FireDue(timeAt(now), func(ts time.Time) error {
		f := firing{string(scope.Key()), ts.Unix()}
		got = append(got, f)
		if then != nil {
			return then(f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestTimers(t *testing.T) {
	b := OpenMemory(MemoryOptions{})
	scope := &KeyScope{}
	tm, err := NewTimers(b, scope, "timeouts")
	if err != nil {
		t.Fatal(err)
	}
	reg := func(key string, sec int64) {
		scope.Set([]byte(key))
		if err := tm.Register(timeAt(sec)); err != nil {
			t.Fatal(err)
		}
	}
	reg("b", 30)
	reg("a", 10)
	reg("c", 20)
	reg("a", 10) // idempotent
	reg("a", 30)
	reg("d", 40)
	scope.Set([]byte("d"))
	tm.Delete(timeAt(40))
	reg("e", 50)
	scope.Set([]byte("e"))
	tm.Delete(timeAt(50))
	reg("e", 50) // registered again after a delete: fires once

	if next, ok := tm.Next(); !ok || next.Unix() != 10 {
		t.Fatalf("Next = %v %v", next, ok)
	}
	scope.Set([]byte("outer"))
	got := fireAll(t, tm, scope, 25, nil)
	if want := []firing{{"a", 10}, {"c", 20}}; !slices.Equal(got, want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
	if string(scope.Key()) != "outer" {
		t.Errorf("FireDue left the scope at %q", scope.Key())
	}
	// A timer may register more timers; due ones fire in the same call.
	got = fireAll(t, tm, scope, 35, func(f firing) error {
		if f.sec == 30 && f.key == "a" {
			return tm.Register(timeAt(31)) // for key a, due
		}
		return nil
	})
	if want := []firing{{"a", 30}, {"b", 30}, {"a", 31}}; !slices.Equal(got, want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
	if next, ok := tm.Next(); !ok || next.Unix() != 50 {
		t.Fatalf("Next = %v %v, want 50 (40 was deleted)", next, ok)
	}

	// Snapshot, restore into a fresh backend, rebuild: the pending timers fire
	// there, and the fired ones do not fire again.
	reg("f", 45)
	s, _ := b.Snapshot(1)
	reg("g", 46) // after the snapshot
	nb := restored(t, newFakeStorage(), s, "chk-1/op/", nil)
	nscope := &KeyScope{}
	ntm, err := NewTimers(nb, nscope, "timeouts")
	if err != nil {
		t.Fatal(err)
	}
	if err := ntm.Rebuild(); err != nil {
		t.Fatal(err)
	}
	got = fireAll(t, ntm, nscope, 1000, nil)
	if want := []firing{{"f", 45}, {"e", 50}}; !slices.Equal(got, want) {
		t.Fatalf("after restore fired %v, want %v", got, want)
	}
	if _, ok := ntm.Next(); ok {
		t.Error("timers left after firing all")
	}
	if err := ntm.Register(time.Unix(-1, 0)); err == nil {
		t.Error("registered a time before 1970 without a key")
	}
}

func TestTimersFireErrorStops(t *testing.T) {
	b := OpenMemory(MemoryOptions{})
	scope := &KeyScope{}
	tm, _ := NewTimers(b, scope, "t")
	for i := range 3 {
		scope.Set(fmt.Appendf(nil, "k%d", i))
		tm.Register(timeAt(int64(i)))
	}
	boom := fmt.Errorf("boom")
	calls := 0
	err := tm.FireDue(timeAt(10), func(time.Time) error { calls++; return boom })
	if err != boom || calls != 1 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
	if next, _ := tm.Next(); next.Unix() != 1 {
		t.Errorf("Next = %v, want the second timer", next)
	}
}

// TestTimersRange: timers keep Unix nanoseconds, 1970 to 2262. A time past
// that is refused (its nanoseconds would wrap around, to a time of no
// timer's), and a FireDue past it fires every timer.
func TestTimersRange(t *testing.T) {
	scope := &KeyScope{}
	tm, err := NewTimers(OpenMemory(MemoryOptions{}), scope, "t")
	if err != nil {
		t.Fatal(err)
	}
	scope.Set([]byte("k"))
	last := time.Unix(0, math.MaxInt64)
	for _, ts := range []time.Time{last.Add(time.Nanosecond), time.UnixMilli(1_700_000_000_000_000 + 1<<40), time.Unix(-1, 0)} {
		if err := tm.Register(ts); err == nil {
			t.Errorf("Register(%v): no error, want it refused", ts)
		}
	}
	if err := tm.Register(last); err != nil {
		t.Fatal(err)
	}
	if got := fireAll(t, tm, scope, 0, nil); len(got) != 0 {
		t.Fatalf("fired %v at 1970", got)
	}
	var n int
	if err := tm.FireDue(time.UnixMilli(math.MaxInt64), func(time.Time) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("FireDue past 2262: fired %d, %v; want the last timer", n, err)
	}
}
