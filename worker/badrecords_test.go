package worker

import (
	"errors"
	"strings"
	"testing"

	"github.com/weirstream/weir/internal/engine"
)

// TestBadRecordsPolicy: a mis-keyed record of the input fails the task
// under --on-decode-error fail; one of an internal topic fails it under
// either policy, saying why (weir keyed it itself).
func TestBadRecordsPolicy(t *testing.T) {
	mk := &engine.MisKeyedError{Operator: "count", KeyBy: "by-word", Key: `"w"`, KeyBytes: []byte("w"), Task: 0, Owner: 1, Partitions: 2, Partitioner: "murmur2"}
	for _, tc := range []struct {
		name       string
		deadLetter string
	}{{"fail", ""}, {"dead-letter", "dlq"}} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			c.DeadLetter = tc.deadLetter
			b, closeB, err := newBadRecords(&c, []string{"job-by-word-repartition"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer closeB()
			if (b.cl != nil) != (tc.deadLetter != "") {
				t.Fatalf("dead-letter producer %v with --dead-letter %q", b.cl != nil, tc.deadLetter)
			}
			pos := engine.Position{Source: "by-word-read", Topic: "job-by-word-repartition", Partition: 0, Offset: 7}
			err = b.MisKeyed(t.Context(), engine.TaskInfo{}, pos, mk.KeyBytes, mk)
			if !errors.Is(err, engine.ErrMisKeyed) || !strings.Contains(err.Error(), "internal topic job-by-word-repartition") {
				t.Errorf("a record of an internal topic: %v, want it to fail the task", err)
			}
			if tc.deadLetter == "" {
				pos.Topic = "in"
				if err := b.MisKeyed(t.Context(), engine.TaskInfo{}, pos, mk.KeyBytes, mk); err != mk {
					t.Errorf("a record of the input under --on-decode-error fail: %v, want its MisKeyedError", err)
				}
			}
		})
	}
}
