package state

import (
	"encoding/binary"
	"testing"
)

// TestDecodeVersion1 reads files laid out as version 1 wrote them (key
// length, key, record length, record), so that checkpoints taken before
// version 2 still restore.
func TestDecodeVersion1(t *testing.T) {
	part := func(b []byte, s string) []byte { return appendRecordPart(b, []byte(s)) }
	file := func(kind tableKind, name string, recs ...string) []byte {
		b := append([]byte(fileMagic), 1, byte(kind))
		b = part(b, name)
		b = binary.AppendUvarint(b, uint64(len(recs)/2))
		for i := 0; i < len(recs); i += 2 {
			b = part(part(b, recs[i]), recs[i+1])
		}
		return b
	}
	m := OpenMemory(MemoryOptions{})
	long := string(make([]byte, 100))
	tab, err := m.decodeTable("v", file(kindValue, "v", "a", "1", "bb", long))
	if err != nil {
		t.Fatal(err)
	}
	v := tab.(*memValue)
	for k, want := range map[string]string{"a": "1", "bb": long} {
		if got, ok, _ := v.Get([]byte(k)); !ok || string(got) != want {
			t.Errorf("value %q = %q %v, want %q", k, got, ok, want)
		}
	}
	nested := string(part(part(part([]byte{2}, "x"), "1"), "y")) + string(part(nil, "2"))
	tab, err = m.decodeTable("m", file(kindMap, "m", "k", nested))
	if err != nil {
		t.Fatal(err)
	}
	for uk, want := range map[string]string{"x": "1", "y": "2"} {
		if got, ok, _ := tab.(*memMap).Get([]byte("k"), []byte(uk)); !ok || string(got) != want {
			t.Errorf("map k/%s = %q %v, want %q", uk, got, ok, want)
		}
	}
	if _, err := m.decodeTable("v", append([]byte(fileMagic), 3, byte(kindValue))); err == nil {
		t.Error("version 3 decoded")
	}
}
