package runtime

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
)

func TestRestoreWalkBack(t *testing.T) {
	type man struct {
		epoch int64
		txns  []string // transactional ids of the sink's committables
	}
	cases := []struct {
		name    string
		ms      []man
		corrupt checkpoint.ID // a manifest overwritten with garbage
		// unusable: checkpoints whose state failed to restore.
		unusable []checkpoint.ID
		outcome  map[string]CommitOutcome
		want     checkpoint.ID // restored checkpoint; 0 with wantErr
		wantErr  string
		// superseded: the error is ErrSuperseded, not ErrNoValidCheckpoint.
		superseded bool
		// anyErr: any error naming wantErr (not a sentinel).
		anyErr bool
		// claim: another owner's claim of the task, if not 0.
		claim int64
		// abort, if set, is AbortCommittables's answer per transaction;
		// wantAborted the transactions it must have been asked to abort.
		abort       map[string]CommitOutcome
		wantAborted []string
	}{
		{name: "newest valid", ms: []man{{1, []string{"a"}}, {1, []string{"b"}}},
			outcome: map[string]CommitOutcome{"a": CommitDone, "b": CommitResumable}, want: 2},
		{name: "newest lost, walk back", ms: []man{{1, []string{"a"}}, {1, []string{"b", "c"}}},
			outcome: map[string]CommitOutcome{"a": CommitDone, "b": CommitLost, "c": CommitLost}, want: 1},
		{name: "lost carried-over transaction is covered by the older checkpoint", ms: []man{{1, []string{"a"}}, {1, []string{"a", "b"}}},
			outcome: map[string]CommitOutcome{"a": CommitDone, "b": CommitLost}, want: 1},
		{name: "partly committed, partly lost", ms: []man{{1, []string{"a"}}, {1, []string{"b", "c"}}},
			outcome: map[string]CommitOutcome{"a": CommitDone, "b": CommitDone, "c": CommitLost}, wantErr: "was committed"},
		{name: "every checkpoint lost", ms: []man{{1, []string{"a"}}, {1, []string{"b"}}},
			outcome: map[string]CommitOutcome{"a": CommitLost, "b": CommitLost}, wantErr: "checkpoint 1 lost a"},
		{name: "fenced zombie manifest discarded", ms: []man{{5, nil}, {9, []string{"b"}}, {5, []string{"z"}}},
			outcome: map[string]CommitOutcome{"b": CommitDone, "z": CommitLost}, want: 2},
		// z can only be a transaction the zombie carried over from before
		// the newer owner took over, which the newer owner committed when
		// it restored: its output is in the newer owner's history.
		{name: "committed zombie manifest after a newer owner's is never restored", ms: []man{{5, nil}, {9, []string{"b"}}, {5, []string{"z"}}},
			outcome: map[string]CommitOutcome{"b": CommitDone, "z": CommitDone}, want: 2},
		// The case of issue 11: valid by the transaction rule alone.
		{name: "zombie manifest without transactions after a newer owner's", ms: []man{{5, []string{"a"}}, {9, []string{"b"}}, {9, nil}, {5, nil}},
			outcome: map[string]CommitOutcome{"a": CommitDone, "b": CommitDone}, want: 3},
		{name: "zombie manifests between a newer owner's", ms: []man{{5, nil}, {9, nil}, {5, nil}, {9, nil}, {5, nil}},
			want: 4},
		{name: "zombie manifest before the newer owner's first is a consistent cut", ms: []man{{5, nil}, {5, nil}},
			want: 2},
		{name: "claimed by a newer owner", ms: []man{{5, nil}}, claim: 12, wantErr: "claimed by the owner with epoch 12", superseded: true},
		{name: "older claims do not stop a newer owner", ms: []man{{5, nil}}, claim: 5, want: 1},
		// Walking back past a checkpoint: its open transactions are aborted
		// first, those the restored checkpoint carries are left alone.
		{name: "walk back aborts the open transactions it passes", ms: []man{{1, []string{"a"}}, {1, []string{"a", "b", "c"}}},
			outcome: map[string]CommitOutcome{"a": CommitResumable, "b": CommitResumable, "c": CommitLost},
			abort:   map[string]CommitOutcome{"b": CommitLost}, wantAborted: []string{"b"}, want: 1},
		// Their owner, still alive, committed one before the abort: walking
		// back would write its output again.
		{name: "walk back refused when its owner committed meanwhile", ms: []man{{1, []string{"a"}}, {1, []string{"b", "c"}}},
			outcome: map[string]CommitOutcome{"a": CommitDone, "b": CommitResumable, "c": CommitLost},
			abort:   map[string]CommitOutcome{"b": CommitDone}, wantAborted: []string{"b"}, wantErr: "transaction b again: it was committed"},
		{name: "newer owner", ms: []man{{5, nil}, {11, nil}}, wantErr: "epoch 11", superseded: true},
		{name: "unreadable newest fails the restore", ms: []man{{1, nil}, {1, nil}}, corrupt: 2, wantErr: "checkpoint 2", anyErr: true},
		{name: "no checkpoint", want: 0},
		{name: "unusable state, no transactions: walk back", ms: []man{{1, nil}, {1, nil}, {1, nil}},
			unusable: []checkpoint.ID{3}, want: 2},
		{name: "unusable state twice: walk back twice", ms: []man{{1, nil}, {1, nil}, {1, nil}},
			unusable: []checkpoint.ID{3, 2}, want: 1},
		{name: "unusable state, transaction not yet committed: walk back", ms: []man{{1, []string{"a"}}, {1, []string{"b"}}},
			outcome: map[string]CommitOutcome{"a": CommitDone, "b": CommitResumable}, unusable: []checkpoint.ID{2}, want: 1},
		{name: "unusable state, transaction committed: refuse", ms: []man{{1, []string{"a"}}, {1, []string{"b"}}},
			outcome: map[string]CommitOutcome{"a": CommitDone, "b": CommitDone}, unusable: []checkpoint.ID{2}, wantErr: "transaction b again: it was committed"},
		{name: "unusable state of the only checkpoint", ms: []man{{1, nil}},
			unusable: []checkpoint.ID{1}, wantErr: "checkpoint 1: file x is corrupt"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
			for i, m := range tc.ms {
				id := checkpoint.ID(i + 1)
				var cs []checkpoint.Committable
				for _, txn := range m.txns {
					cs = append(cs, checkpoint.Committable{Operator: "out", TransactionalID: txn})
				}
				b, err := checkpoint.EncodeManifest(checkpoint.Manifest{Version: checkpoint.FormatVersion, Job: "j", Task: 0, Checkpoint: id, Epoch: m.epoch,
					Operators: []checkpoint.Ack{{Operator: "out", Committables: cs}}})
				if err != nil {
					t.Fatal(err)
				}
				if id == tc.corrupt {
					b = []byte("{not a manifest")
				}
				if err := st.PutIfAbsent(ctx, checkpoint.ManifestName("j", 0, id), b); err != nil {
					t.Fatal(err)
				}
			}
			if tc.claim != 0 {
				if err := checkpoint.Claim(ctx, st, "j", 0, tc.claim); err != nil {
					t.Fatal(err)
				}
			}
			cfg := &Config{Epoch: 10, CheckCommittables: func(_ context.Context, cs []checkpoint.Committable) ([]CommitOutcome, error) {
				out := make([]CommitOutcome, len(cs))
				for i, c := range cs {
					out[i] = tc.outcome[c.TransactionalID]
				}
				return out, nil
			}}
			if err := cfg.Validate("j"); err == nil {
				t.Fatal("config without tasks and storage validated")
			}
			var aborted []string
			if tc.abort != nil {
				cfg.AbortCommittables = func(_ context.Context, cs []checkpoint.Committable) ([]CommitOutcome, error) {
					out := make([]CommitOutcome, len(cs))
					for i, c := range cs {
						aborted = append(aborted, c.TransactionalID)
						out[i] = tc.abort[c.TransactionalID]
					}
					return out, nil
				}
			}
			tk := &task{job: "j", storage: st, cfg: cfg, epoch: cfg.Epoch, log: cfg.Logger, unusable: map[checkpoint.ID]error{}}
			defer func() {
				slices.Sort(aborted)
				if !slices.Equal(aborted, tc.wantAborted) {
					t.Errorf("aborted %v, want %v", aborted, tc.wantAborted)
				}
			}()
			for _, id := range tc.unusable {
				tk.unusable[id] = errors.New("file x is corrupt")
			}
			_, err := tk.restore(ctx)
			if tc.wantErr != "" {
				want := ErrNoValidCheckpoint
				if tc.superseded {
					want = ErrSuperseded
				}
				if tc.anyErr && err != nil {
					want = err
				}
				if !errors.Is(err, want) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want %v with %q, got %v", want, tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tk.restoredFrom != tc.want {
				t.Fatalf("restored from %d, want %d", tk.restoredFrom, tc.want)
			}
			claims, err := checkpoint.Claims(ctx, st, "j", 0)
			if err != nil || len(claims) != 1 || claims[0] != cfg.Epoch {
				t.Fatalf("claims after the restore: %v (%v), want only this owner's [%d]", claims, err, cfg.Epoch)
			}
		})
	}
}
