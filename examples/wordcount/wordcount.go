// Package wordcount is the repartition example job: a running count of
// each word over a topic of lines. The lines are keyed by anything (their
// partition says nothing about their words), so the words go through an
// internal repartition topic, keyed by word, to the task that counts that
// word: correct with any number of workers.
package wordcount

import (
	"encoding/json"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// Out is a word's running count after one of its occurrences.
type Out struct {
	Word  string `json:"word"`
	Count int64  `json:"count"`
}

// Operator names (they key the job's state in checkpoints).
const (
	SourceName      = "lines"
	SplitName       = "split"
	RepartitionName = "by-word"
	CountName       = "count"
	SinkName        = "output"
)

// Decode reads a line: the record's value.
func Decode(r *kgo.Record) (string, error) { return string(r.Value), nil }

// Words splits a line into its words: lower case, separated by anything
// that is not a letter or a digit.
func Words(line string) []string {
	return strings.FieldsFunc(strings.ToLower(line), func(r rune) bool {
		return !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r > 127)
	})
}

// Encode writes o as JSON, keyed by its word.
func Encode(o Out) (*kgo.Record, error) {
	v, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Key: []byte(o.Word), Value: v}, nil
}

// Topics the job reads and writes, by default (--input and --output point
// them elsewhere).
const (
	InputTopic  = "lines"
	OutputTopic = "word-counts"
)

func init() { stream.Register("wordcount", Build) }

// Build is the word count job: InputTopic -> Counts -> OutputTopic.
func Build(job *stream.Job) {
	stream.Write(Counts(stream.Read(job, SourceName, InputTopic, Decode)), SinkName, OutputTopic, Encode)
}

// Counts is the graph: lines -> words -> keyed by word (moved to the task
// of their word) -> count.
func Counts(lines stream.Stream[string]) stream.Stream[Out] {
	words := stream.FlatMap(lines, SplitName, func(line string, out *stream.Emitter[string]) error {
		for _, word := range Words(line) {
			if err := out.Emit(word); err != nil {
				return err
			}
		}
		return nil
	})
	byWord := stream.KeyBy(words, RepartitionName, func(word string) string { return word }, state.String(), state.String())
	counts := stream.Process(byWord, CountName, func(s *stream.Setup) (stream.Processor[string, string, Out], error) {
		count, err := stream.ValueState(s, "count", state.Int64())
		if err != nil {
			return stream.Processor[string, string, Out]{}, err
		}
		return stream.Processor[string, string, Out]{
			Process: func(ctx *stream.Context[string, Out], word string) error {
				n, _, err := count.Get()
				if err != nil {
					return err
				}
				n++
				if err := count.Set(n); err != nil {
					return err
				}
				return ctx.Emit(Out{Word: word, Count: n})
			},
		}, nil
	})
	return counts
}
