package stream_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/jobenv"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

func decodeString(r *kgo.Record) (string, error) { return string(r.Value), nil }

func encodeString(s string) (*kgo.Record, error) { return &kgo.Record{Value: []byte(s)}, nil }

// kafkaJob is a job bound to an environment of brokers that are never
// dialled: building opens no connection.
func kafkaJob(name string, env *jobenv.Env) *stream.Job {
	job := stream.NewJob(name)
	env.Name, env.Brokers = name, []string{"127.0.0.1:1"}
	jobenv.Bind(job, env)
	return job
}

// TestReadWriteNeedKafka: a job's topics without a worker fail Build,
// naming each read and write, rather than running with nothing.
func TestReadWriteNeedKafka(t *testing.T) {
	job := stream.NewJob("no-kafka")
	in := stream.Read(job, "lines", "lines", decodeString)
	stream.Write(in, "out", "out", encodeString)
	_, err := job.Build()
	if err == nil || !strings.Contains(err.Error(), "read lines, write out: need the Kafka a worker gives the job") {
		t.Fatalf("Build: %v", err)
	}
}

// TestTopicsResolved: the job's topic names, pointed elsewhere by the
// environment's overrides, are what the worker is told the job reads,
// writes and moves keys through.
func TestTopicsResolved(t *testing.T) {
	env := &jobenv.Env{Topics: map[string]string{"orders": "prod.orders"}}
	job := kafkaJob("shop", env)
	orders := stream.Read(job, "orders", "orders", decodeString)
	payments := stream.Read(job, "payments", "payments", decodeString)
	byWord := stream.KeyBy(stream.Union("all", orders, payments), "by-value", func(s string) string { return s }, state.String(), state.String())
	counted := stream.Process(byWord, "count", func(*stream.Setup) (stream.Processor[string, string, string], error) {
		return stream.Processor[string, string, string]{Process: func(ctx *stream.Context[string, string], s string) error { return ctx.Emit(s) }}, nil
	})
	stream.Write(counted, "paid", "paid", encodeString)
	stream.Write(counted, "rejects", "rejects", encodeString)
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"prod.orders", "payments"}; !slices.Equal(env.Inputs, want) {
		t.Errorf("inputs %v, want %v", env.Inputs, want)
	}
	if want := []string{"paid", "rejects"}; !slices.Equal(env.Outputs, want) {
		t.Errorf("outputs %v, want %v", env.Outputs, want)
	}
	if want := []string{"shop-by-value-repartition"}; !slices.Equal(env.Internal, want) {
		t.Errorf("internal %v, want %v", env.Internal, want)
	}
	// Two writes: each encodes, and one sink writes both in its
	// transactions.
	ops := plan.Operators()
	for _, op := range []string{"paid", "rejects", stream.WritesName, stream.WritesName + "-sink", "by-value-write", "by-value-read"} {
		if !slices.Contains(ops, op) {
			t.Errorf("operators %v lack %s", ops, op)
		}
	}
	// That sink names both outputs: a task's start asks each for
	// transactions a skipped marker left open.
	type topicser interface{ Topics() []string }
	if s, ok := plan.Committer(stream.WritesName + "-sink").(topicser); !ok {
		t.Errorf("the writes' sink %T does not tell its topics", plan.Committer(stream.WritesName+"-sink"))
	} else if got, want := s.Topics(), []string{"paid", "rejects"}; !slices.Equal(got, want) {
		t.Errorf("the writes' sink asks %v at a start, want %v", got, want)
	}
	if s, ok := plan.Committer("by-value-write").(topicser); !ok || !slices.Equal(s.Topics(), []string{"shop-by-value-repartition"}) {
		t.Errorf("the repartition's sink: %v", plan.Committer("by-value-write"))
	}
}

// TestOneOfEachOverrides: --input and --output point a job's only read and
// write; a job with two reads refuses --input, naming the setting and the
// way out.
func TestOneOfEachOverrides(t *testing.T) {
	env := &jobenv.Env{Input: "in-7", Output: "out-7"}
	job := kafkaJob("one", env)
	stream.Write(stream.Read(job, "lines", "lines", decodeString), "out", "out", encodeString)
	if _, err := job.Build(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(env.Inputs, []string{"in-7"}) || !slices.Equal(env.Outputs, []string{"out-7"}) {
		t.Errorf("topics %v -> %v", env.Inputs, env.Outputs)
	}

	env = &jobenv.Env{Input: "in-7"}
	job = kafkaJob("two", env)
	a := stream.Read(job, "a", "a", decodeString)
	b := stream.Read(job, "b", "b", decodeString)
	stream.Write(stream.Union("ab", a, b), "out", "out", encodeString)
	_, err := job.Build()
	if err == nil || !strings.Contains(err.Error(), "--input: the job reads 2 topics (a, b): point each elsewhere with --topic NAME=TOPIC") {
		t.Errorf("two reads under --input: %v", err)
	}

	env = &jobenv.Env{}
	job = kafkaJob("loop", env)
	stream.Write(stream.Read(job, "a", "a", decodeString), "out", "a", encodeString)
	if _, err := job.Build(); err == nil || !strings.Contains(err.Error(), "topic a is also an input") {
		t.Errorf("writing the input: %v", err)
	}
}

// TestTopicOverridesMustApply: a --topic NAME=TOPIC that names no topic of
// the job (a typo) would leave the job on its own topic, and one that
// --input or --output also points would lose to it; both are refused,
// naming the settings.
func TestTopicOverridesMustApply(t *testing.T) {
	build := func(env *jobenv.Env) error {
		job := kafkaJob("shop", env)
		stream.Write(stream.Read(job, "orders", "orders", decodeString), "paid", "paid", encodeString)
		_, err := job.Build()
		return err
	}
	if err := build(&jobenv.Env{Topics: map[string]string{"orders": "prod.orders", "paid": "prod.paid"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  *jobenv.Env
		want string
	}{
		{&jobenv.Env{Topics: map[string]string{"orders": "prod.orders", "payd": "prod.paid"}},
			`--topic payd=prod.paid: the job has no topic "payd" (it reads and writes orders, paid)`},
		{&jobenv.Env{Input: "staging.orders", Topics: map[string]string{"orders": "prod.orders"}},
			`--input staging.orders and --topic orders=prod.orders both point the job's read "orders" elsewhere`},
		{&jobenv.Env{Output: "staging.paid", Topics: map[string]string{"paid": "prod.paid"}},
			`--output staging.paid and --topic paid=prod.paid both point the job's write "paid" elsewhere`},
	} {
		if err := build(tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want %q", tc.env, err, tc.want)
		}
	}
}

// TestKeyByWithoutKafkaRunsOneTask: built without Kafka, KeyBy cannot move
// records, so its plan runs task 0 and refuses any other, loudly; task 0
// alone counts right.
func TestKeyByWithoutKafkaRunsOneTask(t *testing.T) {
	build := func() (*engine.Plan, *stream.Collected[string]) {
		job := stream.NewJob("keyby-local")
		words := stream.Source(job, "words", stream.SliceSource([][]string{{"a", "b", "a"}, {"b", "b"}}))
		byWord := stream.KeyBy(words, "by-word", func(w string) string { return w }, state.String(), state.String())
		counts := stream.Process(byWord, "count", func(s *stream.Setup) (stream.Processor[string, string, string], error) {
			n, err := stream.ValueState(s, "n", state.Int64())
			return stream.Processor[string, string, string]{Process: func(ctx *stream.Context[string, string], w string) error {
				c, _, err := n.Get()
				if err != nil {
					return err
				}
				if err := n.Set(c + 1); err != nil {
					return err
				}
				return ctx.Emit(w + "=" + string(rune('0'+c+1)))
			}}, err
		})
		out := stream.Collect[string]()
		stream.Sink(counts, "out", out.Sink())
		plan, err := job.Build()
		if err != nil {
			t.Fatal(err)
		}
		return plan, out
	}
	cfg := func(tasks ...int) engine.Config {
		return engine.Config{Tasks: tasks, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}),
			Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond}, StateDir: t.TempDir()}
	}
	plan, _ := build()
	err := engine.Run(t.Context(), plan, cfg(0, 1))
	if err == nil || !strings.Contains(err.Error(), "task 1: operators [by-word] move records between tasks") {
		t.Fatalf("two tasks: %v", err)
	}
	plan, out := build()
	if err := engine.Run(t.Context(), plan, cfg(0)); err != nil {
		t.Fatal(err)
	}
	if got, want := out.Records(), []string{"a=1", "b=1", "a=2"}; !slices.Equal(got, want) {
		t.Errorf("task 0 alone: %v, want %v", got, want)
	}
}
