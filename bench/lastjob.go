package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/worker"
)

// The restore benchmark's job, "last": it keeps each key's last value
// (about a kilobyte, so that a million keys are a gigabyte of state) and,
// for each input record, emits the sequence number of the value it
// replaced, -1 for none. A restore that lost or rolled back a key's value
// shows in the next result for that key. bench/peers/kstreams's Last is
// the same job on Kafka Streams.
//
// An input value is "<seq>:<padding>"; an output value the previous
// value's <seq> in decimal, keyed by the input's key.

type lastIn struct {
	key   string
	value []byte
}

type lastOut struct {
	key  string
	prev int64
}

func decodeLast(r *kgo.Record) (lastIn, error) {
	if len(r.Key) == 0 {
		return lastIn{}, errors.New("last: record has no key")
	}
	if _, err := seqOf(r.Value); err != nil {
		return lastIn{}, err
	}
	return lastIn{key: string(r.Key), value: r.Value}, nil
}

// seqOf is the <seq> of a value "<seq>:<padding>".
func seqOf(v []byte) (int64, error) {
	i := bytes.IndexByte(v, ':')
	if i < 0 {
		return 0, fmt.Errorf("last: value %.20q... is not <seq>:<padding>", v)
	}
	n, err := strconv.ParseInt(string(v[:i]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("last: value %.20q... is not <seq>:<padding>", v)
	}
	return n, nil
}

func encodeLast(o lastOut) (*kgo.Record, error) {
	return &kgo.Record{Key: []byte(o.key), Value: strconv.AppendInt(nil, o.prev, 10)}, nil
}

// buildLast reads topic "last-input" and writes "last-output"; the
// benchmark points both elsewhere (--input, --output).
func buildLast(job *stream.Job) {
	in := stream.Read(job, "input", "last-input", decodeLast)
	// Keyed by the record key: no move.
	keyed := stream.KeyByPartitioned(in, "by-key", func(r lastIn) string { return r.key }, state.String())
	prevs := stream.Process(keyed, "last", func(s *stream.Setup) (stream.Processor[string, lastIn, lastOut], error) {
		last, err := stream.ValueState(s, "value", state.Bytes())
		if err != nil {
			return stream.Processor[string, lastIn, lastOut]{}, err
		}
		return stream.Processor[string, lastIn, lastOut]{
			Process: func(ctx *stream.Context[string, lastOut], r lastIn) error {
				v, ok, err := last.Get()
				if err != nil {
					return err
				}
				prev := int64(-1)
				if ok {
					if prev, err = seqOf(v); err != nil {
						return err
					}
				}
				if err := last.Set(r.value); err != nil {
					return err
				}
				return ctx.Emit(lastOut{key: ctx.Key(), prev: prev})
			},
		}, nil
	})
	stream.Write(prevs, "output", "last-output", encodeLast)
}

// lastMain is weir's side of the restore benchmark, run as a child: `bench
// last run --name ... (the processor's flags)` is a worker of the last
// job.
func lastMain(args []string) int {
	worker.TuneGC()
	ctx, drain, stop := worker.Signals()
	defer stop()
	return worker.Command(ctx, drain, args, os.LookupEnv, os.Stderr, worker.NewJob("last", buildLast))
}
