package state_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/state"
)

// A Pebble backend checkpoints into storage and restores from it elsewhere.
// Immutable SSTs go to the task's shared folder, uploaded once and referenced
// by every later checkpoint that still contains them (TestPebbleIncremental
// checks what a second checkpoint uploads: here a compaction may merge the
// two tiny SSTs, so it is not printed).
func ExamplePebble() {
	ctx := context.Background()
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{MaxObjectSize: -1})
	dir, _ := os.MkdirTemp("", "weir-example")
	defer os.RemoveAll(dir)

	// The flush cut puts even these few writes in an SST; with the default
	// WAL cut they would travel in the checkpoint's copy of the WAL.
	open := state.NewPebble(state.PebbleOptions{Cut: state.PebbleCutFlush})
	b, err := open(0, "counts", dir+"/a")
	if err != nil {
		panic(err)
	}
	defer b.Close()
	scope := &state.KeyScope{}
	count, _ := state.NewValue(b, scope, "count", state.Int64())
	scope.Set([]byte("user-1"))
	count.Set(41)

	checkpointOnce := func(id checkpoint.ID) checkpoint.StateHandle {
		snap, err := b.Snapshot(id) // at the barrier, on the processing goroutine
		if err != nil {
			panic(err)
		}
		defer snap.Release()
		h, err := snap.Upload(ctx, st, checkpoint.CheckpointDir("job", 0, id)+"counts/", checkpoint.SharedDir("job", 0)+"counts/")
		if err != nil {
			panic(err)
		}
		return h
	}
	h1 := checkpointOnce(1)
	count.Set(42)
	h2 := checkpointOnce(2)
	for _, f := range h1.Files {
		if f.Shared {
			fmt.Println("an SST is shared:", strings.HasPrefix(f.Name, "job/shared/0/counts/"))
			break
		}
	}

	c, _ := open(0, "counts", dir+"/b")
	defer c.Close()
	scope2 := &state.KeyScope{}
	count2, _ := state.NewValue(c, scope2, "count", state.Int64())
	if err := c.Restore(ctx, st, h2); err != nil {
		panic(err)
	}
	scope2.Set([]byte("user-1"))
	n, _, _ := count2.Get()
	fmt.Println("restored:", n)
	// Output:
	// an SST is shared: true
	// restored: 42
}
