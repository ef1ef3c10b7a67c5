package state

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestValueHandle(t *testing.T) {
	b := OpenMemory(MemoryOptions{})
	scope := &KeyScope{}
	count, err := NewValue(b, scope, "count", Int64())
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		key    string
		op     string // get, set, clear
		val    int64
		want   int64
		wantOK bool
	}{
		{"a", "get", 0, 0, false},
		{"a", "set", 5, 0, false},
		{"a", "get", 0, 5, true},
		{"b", "get", 0, 0, false}, // per-key isolation
		{"b", "set", -7, 0, false},
		{"a", "get", 0, 5, true},
		{"b", "get", 0, -7, true},
		{"a", "set", math.MaxInt64, 0, false},
		{"a", "get", 0, math.MaxInt64, true},
		{"a", "clear", 0, 0, false},
		{"a", "get", 0, 0, false},
		{"b", "get", 0, -7, true},
	}
	for i, s := range steps {
		scope.Set([]byte(s.key))
		switch s.op {
		case "set":
			err = count.Set(s.val)
		case "clear":
			err = count.Clear()
		case "get":
			var got int64
			var ok bool
			got, ok, err = count.Get()
			if got != s.want || ok != s.wantOK {
				t.Errorf("step %d: Get on %q = %d, %v; want %d, %v", i, s.key, got, ok, s.want, s.wantOK)
			}
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
}

func TestListHandle(t *testing.T) {
	b := OpenMemory(MemoryOptions{})
	scope := &KeyScope{}
	l, err := NewList(b, scope, "events", String())
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("long ", 20)
	adds := []struct{ key, val string }{{"a", "1"}, {"b", "x"}, {"a", ""}, {"a", long}, {"a", "3"}}
	for _, a := range adds {
		scope.Set([]byte(a.key))
		if err := l.Add(a.val); err != nil {
			t.Fatal(err)
		}
	}
	for key, want := range map[string][]string{"a": {"1", "", long, "3"}, "b": {"x"}, "c": nil} {
		scope.Set([]byte(key))
		got, err := l.All()
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("All on %q = %q, %v; want %q", key, got, err, want)
		}
	}
	scope.Set([]byte("a"))
	stop := errors.New("stop")
	n := 0
	if err := l.Range(func(string) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("Range with a failing fn: err %v after %d calls", err, n)
	}
	if err := l.Clear(); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.All(); got != nil {
		t.Errorf("after Clear: %q", got)
	}
	scope.Set([]byte("b"))
	if got, _ := l.All(); len(got) != 1 {
		t.Errorf("Clear of a cleared b: %q", got)
	}
}

func TestMapHandle(t *testing.T) {
	b := OpenMemory(MemoryOptions{})
	scope := &KeyScope{}
	m, err := NewMap(b, scope, "by-hour", Int64(), Float64())
	if err != nil {
		t.Fatal(err)
	}
	scope.Set([]byte("a"))
	for _, h := range []int64{5, -3, 100, 0, -300} {
		if err := m.Put(h, float64(h)/2); err != nil {
			t.Fatal(err)
		}
	}
	scope.Set([]byte("b"))
	m.Put(1, 1)
	scope.Set([]byte("a"))
	if v, ok, err := m.Get(100); v != 50 || !ok || err != nil {
		t.Errorf("Get(100) = %v, %v, %v", v, ok, err)
	}
	if _, ok, _ := m.Get(1); ok {
		t.Error("key a sees key b's entry")
	}
	m.Delete(5)
	m.Put(0, 42)
	var keys []int64
	var vals []float64
	m.Range(func(k int64, v float64) error { keys = append(keys, k); vals = append(vals, v); return nil })
	if !slices.Equal(keys, []int64{-300, -3, 0, 100}) || !slices.Equal(vals, []float64{-150, -1.5, 42, 50}) {
		t.Errorf("Range = %v %v; want numeric order", keys, vals)
	}
	m.Clear()
	n := 0
	m.Range(func(int64, float64) error { n++; return nil })
	scope.Set([]byte("b"))
	if v, ok, _ := m.Get(1); n != 0 || !ok || v != 1 {
		t.Errorf("Clear: %d entries left on a, b = %v %v", n, v, ok)
	}
}

func TestHandleErrors(t *testing.T) {
	b := OpenMemory(MemoryOptions{})
	scope := &KeyScope{}
	v, _ := NewValue(b, scope, "clicks", Int64())
	l, _ := NewList(b, scope, "log", String())
	m, _ := NewMap(b, scope, "seen", String(), Int64())
	tm, _ := NewTimers(b, scope, "timeouts")
	noKey := []struct {
		name string
		err  error
		want string
	}{
		{"value get", func() error { _, _, err := v.Get(); return err }(), `state "clicks": no current key`},
		{"value set", v.Set(1), `state "clicks": no current key`},
		{"list add", l.Add("x"), `state "log": no current key`},
		{"map put", m.Put("x", 1), `state "seen": no current key`},
		{"timer", tm.Register(timeAt(1)), `timers "timeouts": no current key`},
	}
	for _, tt := range noKey {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.name, tt.err, tt.want)
		}
	}
	// A value written with another codec fails to decode, naming the state.
	raw := mustValue(t, b, "clicks")
	raw.Put([]byte("k"), []byte("abc"))
	scope.Set([]byte("k"))
	if _, _, err := v.Get(); err == nil || !strings.Contains(err.Error(), `state "clicks": get: state: decode int64: want 8 bytes, got 3`) {
		t.Errorf("decode error = %v", err)
	}
	if _, err := NewValue(b, scope, "log", Int64()); err == nil {
		t.Error("declaring a list's name as a value succeeded")
	}
	if _, err := NewValue[int64](b, nil, "x", Int64()); err == nil {
		t.Error("nil scope accepted")
	}
	if _, err := NewValue[int64](b, scope, "x", nil); err == nil {
		t.Error("nil codec accepted")
	}
	j, _ := NewValue(b, scope, "json", JSON[float64]())
	if err := j.Set(math.NaN()); err == nil || !strings.Contains(err.Error(), `state "json": set: state: encode json`) {
		t.Errorf("json encode error = %v", err)
	}
}

// TestValueSetAllocs pins the hot path: Get and Set of an existing key do not
// allocate once no snapshot shares the entry.
func TestValueSetAllocs(t *testing.T) {
	b := OpenMemory(MemoryOptions{})
	scope := &KeyScope{}
	v, _ := NewValue(b, scope, "count", Int64())
	key := []byte("12345678")
	scope.Set(key)
	v.Set(1)
	allocs := testing.AllocsPerRun(1000, func() {
		n, _, _ := v.Get()
		v.Set(n + 1)
	})
	if allocs != 0 {
		t.Errorf("Get+Set allocates %.1f times", allocs)
	}
	raw := mustValue(t, b, "raw")
	val := make([]byte, 40) // out of line
	raw.Put(key, val)
	if a := testing.AllocsPerRun(1000, func() { raw.Put(key, val) }); a != 0 {
		t.Errorf("out-of-line overwrite allocates %.1f times", a)
	}
}
