package count

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// In is one input record of the count job.
type In struct {
	Key string
	N   int64
}

// Out is what the count job emits for each input record: Key's running
// count and sum after that record.
type Out struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
	Sum   int64  `json:"sum"`
}

// Operator names. They key the state and source positions in checkpoints:
// a worker refuses to restore a checkpoint that has a source or a stateful
// operator under a name the job no longer has.
const (
	SourceName  = "input"
	KeyByName   = "by-key"
	ProcessName = "count"
	SinkName    = "output"
)

// Decode reads an input record: the Kafka record key, and its value as the
// decimal text of an int64. A record without a key or with another value is
// an error.
func Decode(r *kgo.Record) (In, error) {
	if len(r.Key) == 0 {
		return In{}, errors.New("count: record has no key")
	}
	n, err := strconv.ParseInt(string(r.Value), 10, 64)
	if err != nil {
		return In{}, fmt.Errorf("count: value %q is not a decimal int64", r.Value)
	}
	return In{Key: string(r.Key), N: n}, nil
}

// Encode writes o as JSON (as encoding/json writes it), keyed by o.Key,
// into buffers the sink reuses once the record is written (see
// stream.AppendEncoder).
var Encode = stream.AppendEncoder(AppendOut)

// AppendOut appends o's record key (o.Key) to key and its value, o as
// JSON, to value.
func AppendOut(key, value []byte, o Out) ([]byte, []byte, error) {
	key = append(key, o.Key...)
	if !plainKey(o.Key) {
		v, err := json.Marshal(o)
		if err != nil {
			return nil, nil, err
		}
		return key, append(value, v...), nil
	}
	// Without reflection.
	value = append(value, `{"key":"`...)
	value = append(value, o.Key...)
	value = append(value, `","count":`...)
	value = strconv.AppendInt(value, o.Count, 10)
	value = append(value, `,"sum":`...)
	value = strconv.AppendInt(value, o.Sum, 10)
	return key, append(value, '}'), nil
}

// plainKey says whether k needs no escaping in JSON: printable ASCII
// without quote, backslash or the characters encoding/json escapes for
// HTML.
func plainKey(k string) bool {
	for i := 0; i < len(k); i++ {
		switch c := k[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// Topics the job reads and writes, by default (--input and --output, or
// --topic input=... and --topic output=..., point them elsewhere).
const (
	InputTopic  = "count-input"
	OutputTopic = "count-output"
)

func init() { stream.Register("count", Build) }

// Build is the count job: InputTopic -> Counts -> OutputTopic.
func Build(job *stream.Job) {
	in := stream.Read(job, SourceName, InputTopic, Decode)
	stream.Write(Counts(in), SinkName, OutputTopic, Encode)
}

// Counts is the count graph: in -> keyed by the record key -> count.
// Keying by the Kafka record key keeps every key in the task of its
// partition: no repartition (and the worker checks every record's key).
func Counts(in stream.Stream[In]) stream.Stream[Out] {
	keyed := stream.KeyByPartitioned(in, KeyByName, func(r In) string { return r.Key }, state.String())
	return stream.Process(keyed, ProcessName, newProcessor)
}

// newProcessor declares the keyed state (a count and a sum per key) once per
// task; Process then runs with the state scoped to the record's key.
func newProcessor(s *stream.Setup) (stream.Processor[string, In, Out], error) {
	count, err := stream.ValueState(s, "count", state.Int64())
	if err != nil {
		return stream.Processor[string, In, Out]{}, err
	}
	sum, err := stream.ValueState(s, "sum", state.Int64())
	if err != nil {
		return stream.Processor[string, In, Out]{}, err
	}
	return stream.Processor[string, In, Out]{
		Process: func(ctx *stream.Context[string, Out], r In) error {
			c, _, err := count.Get()
			if err != nil {
				return err
			}
			s, _, err := sum.Get()
			if err != nil {
				return err
			}
			c, s = c+1, s+r.N
			if err := count.Set(c); err != nil {
				return err
			}
			if err := sum.Set(s); err != nil {
				return err
			}
			return ctx.Emit(Out{Key: ctx.Key(), Count: c, Sum: s})
		},
	}, nil
}
