package state

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/weirstream/weir/checkpoint"
)

// model is the content of a backend as plain maps: the reference the tests
// compare the memory backend against.
type model struct {
	values map[string]map[string]string
	lists  map[string]map[string][]string
	maps   map[string]map[string]map[string]string
}

func newModel() *model {
	return &model{values: map[string]map[string]string{}, lists: map[string]map[string][]string{}, maps: map[string]map[string]map[string]string{}}
}

func (m *model) clone() *model {
	c := newModel()
	for t, kv := range m.values {
		c.values[t] = maps.Clone(kv)
	}
	for t, kl := range m.lists {
		c.lists[t] = map[string][]string{}
		for k, l := range kl {
			c.lists[t][k] = slices.Clone(l)
		}
	}
	for t, km := range m.maps {
		c.maps[t] = map[string]map[string]string{}
		for k, mm := range km {
			c.maps[t][k] = maps.Clone(mm)
		}
	}
	return c
}

// dump reads every table of b through its public table interfaces (and the
// memory backend's key walk, which the interfaces do not offer).
func dump(t *testing.T, b *Memory) *model {
	t.Helper()
	d := newModel()
	for name, tab := range b.tables {
		switch tab := tab.(type) {
		case *memValue:
			d.values[name] = map[string]string{}
			tab.m.each(func(k, v []byte) error {
				got, ok, err := tab.Get(k)
				if err != nil || !ok || string(got) != string(v) {
					t.Fatalf("%s: Get(%q) = %q, %v, %v; walk has %q", name, k, got, ok, err, v)
				}
				d.values[name][string(k)] = string(v)
				return nil
			})
		case *memList:
			d.lists[name] = map[string][]string{}
			tab.m.each(func(k, _ []byte) error {
				var l []string
				if err := tab.Iterate(k, func(v []byte) error { l = append(l, string(v)); return nil }); err != nil {
					t.Fatal(err)
				}
				d.lists[name][string(k)] = l
				return nil
			})
		case *memMap:
			d.maps[name] = map[string]map[string]string{}
			var prev string
			first := true
			err := tab.Scan(func(k, uk, v []byte) error {
				cur := string(k) + "\x00" + string(uk)
				if !first && cur <= prev {
					return fmt.Errorf("Scan out of order: %q after %q", cur, prev)
				}
				first, prev = false, cur
				if d.maps[name][string(k)] == nil {
					d.maps[name][string(k)] = map[string]string{}
				}
				d.maps[name][string(k)][string(uk)] = string(v)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return d
}

func (m *model) equal(o *model) bool {
	return reflect.DeepEqual(m.values, o.values) && reflect.DeepEqual(m.lists, o.lists) && reflect.DeepEqual(m.maps, o.maps)
}

func (m *model) String() string {
	return fmt.Sprintf("values=%v lists=%v maps=%v", m.values, m.lists, m.maps)
}

// restored uploads s into st and restores it into a fresh backend with the
// same tables declared.
func restored(t *testing.T, st checkpoint.Storage, s Snapshot, dir string, declare func(b *Memory)) *Memory {
	t.Helper()
	ctx := context.Background()
	h, err := s.Upload(ctx, st, dir, "shared/")
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	s.Release()
	b := OpenMemory(MemoryOptions{})
	if declare != nil {
		declare(b)
	}
	if err := b.Restore(ctx, st, h); err != nil {
		t.Fatalf("restore: %v", err)
	}
	return b
}
