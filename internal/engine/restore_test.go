package engine

import (
	"context"
	"errors"
	"log/slog"
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
		// committed: transactions the sink reported committed
		// (checkpoint.Ack.Committed), by checkpoint.
		committed map[checkpoint.ID][]string
		// records: commit records (checkpoint.CommitRecord) by checkpoint;
		// aborted: records of transactions found aborted.
		records, aborted map[checkpoint.ID][]string
		// wantResumed, if set: the committables left for the sinks to
		// resume (those storage recorded as committed are not).
		wantResumed []string
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
		{name: "unusable state, transaction not yet committed: aborted, walk back", ms: []man{{1, []string{"a"}}, {1, []string{"b"}}},
			outcome: map[string]CommitOutcome{"a": CommitDone, "b": CommitResumable}, unusable: []checkpoint.ID{2}, want: 1, wantAborted: []string{"b"}},
		{name: "unusable state, transaction committed: refuse", ms: []man{{1, []string{"a"}}, {1, []string{"b"}}},
			outcome: map[string]CommitOutcome{"a": CommitDone, "b": CommitDone}, unusable: []checkpoint.ID{2}, wantErr: "transaction b again: it was committed"},
		{name: "unusable state of the only checkpoint", ms: []man{{1, nil}},
			unusable: []checkpoint.ID{1}, wantErr: "checkpoint 1: file x is corrupt"},

		// Storage's record of commits decides over the coordinator's,
		// which is gone once a transactional id was re-initialised or
		// expired (issue 21).
		{name: "restored, committed, re-initialised, then the next state lost: the record says committed",
			ms: []man{{1, []string{"a"}}, {1, nil}}, committed: map[checkpoint.ID][]string{2: {"a"}},
			outcome:  map[string]CommitOutcome{"a": CommitLost}, // as the broker answers for a re-initialised id
			unusable: []checkpoint.ID{2}, want: 1, wantResumed: []string{}},
		{name: "final checkpoint's transactions expired, commit record kept",
			ms: []man{{1, []string{"a"}}, {1, []string{"b"}}}, committed: map[checkpoint.ID][]string{2: {"a"}},
			records: map[checkpoint.ID][]string{2: {"b"}},
			outcome: map[string]CommitOutcome{"b": CommitUnknown}, want: 2, wantResumed: []string{}},
		{name: "expired and no record: cannot tell, loud",
			ms: []man{{1, []string{"a"}}, {1, []string{"b"}}}, committed: map[checkpoint.ID][]string{2: {"a"}},
			outcome: map[string]CommitOutcome{"b": CommitUnknown}, wantErr: "transactions b (producer 0, epoch 0), of which neither the broker nor checkpoint storage keeps a record"},
		{name: "walking back past an unknown transaction: loud",
			ms: []man{{1, []string{"a"}}, {1, []string{"b"}}}, committed: map[checkpoint.ID][]string{2: {"a"}},
			outcome: map[string]CommitOutcome{"b": CommitUnknown}, unusable: []checkpoint.ID{2},
			wantErr: "transaction b again if it was committed, which cannot be told"},
		{name: "walking back past a recorded commit: refused, whatever the broker says",
			ms: []man{{1, []string{"a"}}, {1, []string{"b"}}, {1, nil}}, committed: map[checkpoint.ID][]string{2: {"a"}, 3: {"b"}},
			outcome: map[string]CommitOutcome{"b": CommitLost}, unusable: []checkpoint.ID{3, 2},
			wantErr: "transaction b again: it was committed"},
		{name: "a zombie's record of a commit counts",
			ms: []man{{5, []string{"a"}}, {9, nil}, {5, nil}}, committed: map[checkpoint.ID][]string{3: {"a"}},
			outcome: map[string]CommitOutcome{"a": CommitUnknown}, unusable: []checkpoint.ID{2},
			want: 1, wantResumed: []string{}},
		{name: "forgotten transactions recorded aborted by hand: walk back",
			ms: []man{{1, []string{"a"}}, {1, []string{"b"}}}, committed: map[checkpoint.ID][]string{2: {"a"}},
			aborted: map[checkpoint.ID][]string{2: {"b"}},
			outcome: map[string]CommitOutcome{"b": CommitUnknown}, want: 1, wantResumed: []string{}},
		{name: "a recorded commit wins over a verdict of aborted",
			ms: []man{{1, []string{"a"}}, {1, []string{"b"}}, {1, nil}}, committed: map[checkpoint.ID][]string{2: {"a"}, 3: {"b"}},
			aborted: map[checkpoint.ID][]string{2: {"b"}}, unusable: []checkpoint.ID{3},
			want: 2, wantResumed: []string{}},
		{name: "only the unrecorded transactions are resumed",
			ms: []man{{1, []string{"a"}}, {1, []string{"a", "b"}}, {1, []string{"c"}}}, committed: map[checkpoint.ID][]string{3: {"a"}},
			outcome: map[string]CommitOutcome{"b": CommitDone, "c": CommitResumable}, want: 3, wantResumed: []string{"c"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
			for i, m := range tc.ms {
				id := checkpoint.ID(i + 1)
				b, err := checkpoint.EncodeManifest(checkpoint.Manifest{Version: checkpoint.FormatVersion, Job: "j", Task: 0, Checkpoint: id, Epoch: m.epoch,
					Operators: []checkpoint.Ack{{Operator: "out", Committables: txnsOf(m.txns), Committed: txnsOf(tc.committed[id])}}})
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
			recorded := map[string]bool{}
			for _, txns := range tc.committed {
				for _, txn := range txns {
					recorded[txn] = true
				}
			}
			for id, txns := range tc.records {
				for _, txn := range txns {
					recorded[txn] = true
				}
				r := checkpoint.CommitRecord{Job: "j", Task: 0, Checkpoint: id, Epoch: tc.ms[id-1].epoch, Committed: txnsOf(txns)}
				if err := checkpoint.WriteCommitRecord(ctx, st, r, "test"); err != nil {
					t.Fatal(err)
				}
			}
			for id, txns := range tc.aborted {
				for _, txn := range txns {
					recorded[txn] = true
				}
				r := checkpoint.CommitRecord{Job: "j", Task: 0, Checkpoint: id, Epoch: tc.ms[id-1].epoch, Aborted: txnsOf(txns), By: "test"}
				if err := checkpoint.WriteCommitRecord(ctx, st, r, "by-hand"); err != nil {
					t.Fatal(err)
				}
			}
			if tc.claim != 0 {
				if err := checkpoint.Claim(ctx, st, "j", 0, tc.claim); err != nil {
					t.Fatal(err)
				}
			}
			cfg := &Config{Epoch: 10}
			if err := cfg.Validate("j"); err == nil {
				t.Fatal("config without tasks and storage validated")
			}
			var aborted []string
			sink := &scriptedCommitter{
				check: func(c checkpoint.Committable) CommitOutcome {
					if recorded[c.TransactionalID] {
						t.Errorf("asked the broker about %s, which storage recorded as committed", c.TransactionalID)
					}
					return tc.outcome[c.TransactionalID]
				},
				abort: func(c checkpoint.Committable) CommitOutcome {
					aborted = append(aborted, c.TransactionalID)
					if o, ok := tc.abort[c.TransactionalID]; ok {
						return o
					}
					return CommitLost
				},
			}
			plan := &Plan{g: &Graph{name: "j", committers: map[string]Committer{"out": sink}}}
			tk := &task{job: "j", storage: st, cfg: cfg, plan: plan, epoch: cfg.Epoch, log: cfg.Logger, unusable: map[checkpoint.ID]error{}}
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
			if tc.wantResumed != nil {
				resumed := []string{}
				if a := tk.restoredAck("out"); a != nil {
					for _, c := range a.Committables {
						resumed = append(resumed, c.TransactionalID)
					}
				}
				if !slices.Equal(resumed, tc.wantResumed) {
					t.Fatalf("sinks resume %v, want %v", resumed, tc.wantResumed)
				}
			}
			claims, err := checkpoint.Claims(ctx, st, "j", 0)
			if err != nil || len(claims) != 1 || claims[0] != cfg.Epoch {
				t.Fatalf("claims after the restore: %v (%v), want only this owner's [%d]", claims, err, cfg.Epoch)
			}
		})
	}
}

func txnsOf(ids []string) []checkpoint.Committable {
	var cs []checkpoint.Committable
	for _, id := range ids {
		cs = append(cs, checkpoint.Committable{Operator: "out", TransactionalID: id})
	}
	return cs
}

// scriptedCommitter answers for a sink's committables as its functions say.
type scriptedCommitter struct {
	check, abort func(checkpoint.Committable) CommitOutcome
}

func (s *scriptedCommitter) CheckCommittables(_ context.Context, cs []checkpoint.Committable) ([]CommitOutcome, error) {
	return answer(cs, s.check), nil
}

func (s *scriptedCommitter) AbortCommittables(_ context.Context, _ *slog.Logger, cs []checkpoint.Committable) ([]CommitOutcome, error) {
	return answer(cs, s.abort), nil
}

func answer(cs []checkpoint.Committable, f func(checkpoint.Committable) CommitOutcome) []CommitOutcome {
	out := make([]CommitOutcome, len(cs))
	for i, c := range cs {
		out[i] = f(c)
	}
	return out
}

// TestNewerCheckpoint: a task's sinks learn whether a checkpoint completed
// after its restore listed them (an older owner, still running, wrote
// it), one the restore saw begun but not complete included.
func TestNewerCheckpoint(t *testing.T) {
	ctx := t.Context()
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	manifest := func(id checkpoint.ID) {
		t.Helper()
		b, err := checkpoint.EncodeManifest(checkpoint.Manifest{Version: checkpoint.FormatVersion, Job: "j", Task: 0, Checkpoint: id, Epoch: 5,
			Operators: []checkpoint.Ack{{Operator: "out"}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.PutIfAbsent(ctx, checkpoint.ManifestName("j", 0, id), b); err != nil {
			t.Fatal(err)
		}
	}
	manifest(1)
	manifest(2)
	// Checkpoint 3 was begun and not completed when the task listed them.
	if err := st.PutIfAbsent(ctx, checkpoint.OwnerDir("j", 0, 3, 5, "a")+"x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	cfg := &Config{Epoch: 10, Logger: slog.New(slog.DiscardHandler)}
	plan := &Plan{g: &Graph{name: "j", committers: map[string]Committer{"out": &scriptedCommitter{}}}}
	tk := &task{job: "j", storage: st, cfg: cfg, plan: plan, epoch: cfg.Epoch, log: cfg.Logger, unusable: map[checkpoint.ID]error{}}
	if _, err := tk.restore(ctx); err != nil {
		t.Fatal(err)
	}
	newer := tk.info("out").NewerCheckpoint
	if n, err := newer(ctx); err != nil || n {
		t.Fatalf("newer checkpoint right after the restore: %v, %v", n, err)
	}
	manifest(3) // the older owner completes the checkpoint it had begun
	if n, err := newer(ctx); err != nil || !n {
		t.Fatalf("after checkpoint 3 completed: %v, %v; want newer", n, err)
	}
}
