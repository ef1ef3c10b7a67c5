package sink

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMaxRecordBytes: a record that does not fit MaxRecordBytes is refused
// before it is produced, with its topic and size, as the producer and the
// broker refuse one (kerr.MessageTooLarge); the limit is checked.
func TestMaxRecordBytes(t *testing.T) {
	c := Config[[]byte]{Brokers: []string{"b:9092"}, Topic: "out", MaxRecordBytes: 1024,
		Encode: func(v []byte) (*kgo.Record, error) { return &kgo.Record{Value: v}, nil }}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.record(bytes.Repeat([]byte{1}, 900), 0); err != nil {
		t.Errorf("a record that fits: %v", err)
	}
	_, err := c.record(bytes.Repeat([]byte{1}, 1000), 0)
	var tl *RecordTooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, kerr.MessageTooLarge) || tl.Topic != "out" || tl.Max != 1024 || tl.Bytes <= 1000 {
		t.Errorf("a record over the limit: %v (%+v)", err, tl)
	}
	c.MaxRecordBytes = 100
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "MaxRecordBytes: 100") {
		t.Errorf("Validate() = %v, want MaxRecordBytes refused", err)
	}
}
