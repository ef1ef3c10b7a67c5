package source_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/source"
)

func TestConfigValidate(t *testing.T) {
	valid := func() source.Config[string] {
		return source.Config[string]{Brokers: []string{"localhost:9092"}, Topics: []string{"in"}, Decode: str}
	}
	tests := []struct {
		name   string
		modify func(*source.Config[string])
		want   []string // substrings of the error; none: valid
	}{
		{"minimal", func(*source.Config[string]) {}, nil},
		{"dead letter implies policy", func(c *source.Config[string]) { c.DeadLetterTopic = "dlq" }, nil},
		{"timestamp", func(c *source.Config[string]) { c.Start, c.StartTime = source.StartTimestamp, time.Now() }, nil},
		{"no brokers", func(c *source.Config[string]) { c.Brokers = nil }, []string{"Brokers"}},
		{"empty broker", func(c *source.Config[string]) { c.Brokers = []string{" "} }, []string{"Brokers[0]"}},
		{"no topics", func(c *source.Config[string]) { c.Topics = nil }, []string{"Topics"}},
		{"duplicate topic", func(c *source.Config[string]) { c.Topics = []string{"in", "in"} }, []string{"Topics[1]", `"in" listed twice`}},
		{"no decoder", func(c *source.Config[string]) { c.Decode = nil }, []string{"Decode"}},
		{"bad start", func(c *source.Config[string]) { c.Start = "newest" }, []string{"Start", "newest"}},
		{"timestamp without time", func(c *source.Config[string]) { c.Start = source.StartTimestamp }, []string{"StartTime", "required"}},
		{"time without timestamp", func(c *source.Config[string]) { c.StartTime = time.Now() }, []string{"StartTime", "earliest"}},
		{"dead-letter without topic", func(c *source.Config[string]) { c.OnDecodeError = source.DeadLetter }, []string{"DeadLetterTopic", "required"}},
		{"fail with topic", func(c *source.Config[string]) { c.OnDecodeError, c.DeadLetterTopic = source.Fail, "dlq" }, []string{"DeadLetterTopic", "never use"}},
		{"bad policy", func(c *source.Config[string]) { c.OnDecodeError = "skip" }, []string{"OnDecodeError", "skip"}},
		{"dead letter is input", func(c *source.Config[string]) { c.DeadLetterTopic = "in" }, []string{"DeadLetterTopic", "input topic"}},
		{"poll wait too long", func(c *source.Config[string]) { c.PollWait = 5 * time.Second }, []string{"PollWait"}},
		{"negative poll records", func(c *source.Config[string]) { c.MaxPollRecords = -1 }, []string{"MaxPollRecords"}},
		{"all reported", func(c *source.Config[string]) { c.Brokers, c.Decode = nil, nil }, []string{"Brokers", "Decode"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.modify(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error naming %v, got none", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if _, ferr := source.Kafka(c); ferr == nil {
				t.Errorf("Kafka accepted a config that Validate refuses")
			}
		})
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]source.Start{"earliest": source.StartEarliest, " Latest": source.StartLatest, "timestamp": source.StartTimestamp} {
		if got, err := source.ParseStart(in); err != nil || got != want {
			t.Errorf("ParseStart(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := source.ParseStart("newest"); err == nil {
		t.Errorf("ParseStart(newest) succeeded")
	}
	for in, want := range map[string]source.OnDecodeError{"dead-letter": source.DeadLetter, "FAIL": source.Fail} {
		if got, err := source.ParseOnDecodeError(in); err != nil || got != want {
			t.Errorf("ParseOnDecodeError(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := source.ParseOnDecodeError("skip"); err == nil {
		t.Errorf("ParseOnDecodeError(skip) succeeded")
	}
}

type intCodec struct{}

func (intCodec) Decode(b []byte) (int, error) {
	var n int
	_, err := fmt.Sscan(string(b), &n)
	return n, err
}

func TestValueDecoder(t *testing.T) {
	dec := source.ValueDecoder[int](intCodec{})
	if v, err := dec(&kgo.Record{Value: []byte("42")}); err != nil || v != 42 {
		t.Fatalf("decode 42: %d, %v", v, err)
	}
	if _, err := dec(&kgo.Record{Value: []byte("x")}); err == nil {
		t.Fatalf("decode x: no error")
	}
}

func ExampleConfig_Validate() {
	cfg := source.Config[string]{
		Brokers:       []string{"localhost:9092"},
		Topics:        []string{"orders", "payments"},
		Decode:        func(r *kgo.Record) (string, error) { return string(r.Value), nil },
		Start:         source.StartTimestamp,
		OnDecodeError: source.DeadLetter,
	}
	fmt.Println(cfg.Validate())
	// Output:
	// StartTime: required with Start "timestamp"
	// DeadLetterTopic: required with OnDecodeError "dead-letter"
}
