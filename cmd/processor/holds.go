package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/worker"
)

// `processor checkpoints holds` prints the holds of a job's tasks (see
// checkpoint.Hold): what stops a task from starting until an operator has
// done what its reason says. `processor checkpoints release` deletes one,
// and the task goes on at its next restart.

type holdsConfig struct {
	checkpointsConfig
	Hold string
}

func holdsCommand(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer, release bool) error {
	c := holdsConfig{checkpointsConfig: checkpointsConfig{Checkpoints: worker.DefaultConfig().Checkpoints, Task: -1}}
	name, synopsis := "processor checkpoints holds", "List the holds of a job's tasks: what stops a task until an operator releases it, and why."
	if release {
		name, synopsis = "processor checkpoints release", "Release a task's hold, once done what its reason says: the task goes on at its next restart."
	}
	fs := cli.NewFlagSet(name, synopsis, stderr)
	c.registerStorage(fs)
	if release {
		fs.IntVar(&c.Task, "task", c.Task, "the held task (required)")
		fs.StringVar(&c.Hold, "hold", c.Hold, "the hold's name, as the task's error and `checkpoints holds` give it (required)")
	} else {
		fs.IntVar(&c.Task, "task", c.Task, "only this task (default: every task with checkpoints)")
		fs.BoolVar(&c.JSON, "json", c.JSON, "print JSON: one object per hold")
	}
	if err := cli.Parse(fs, args, lookup); err != nil {
		return err
	}
	errs := []error{c.checkpointsConfig.validate(false)}
	if release {
		if c.Task < 0 {
			errs = append(errs, errors.New("--task: required: the held task"))
		}
		if !checkpoint.ValidHoldName(c.Hold) {
			errs = append(errs, fmt.Errorf("--hold: %q, want a hold's name (letters, digits, '-', '_', '.'), as `checkpoints holds` lists them", c.Hold))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return cli.UsageError{Err: err}
	}
	st, err := openStorage(ctx, c.Checkpoints)
	if err != nil {
		return err
	}
	job := c.name()
	if release {
		if err := checkpoint.ReleaseHold(ctx, st, job, c.Task, c.Hold); err != nil {
			if errors.Is(err, checkpoint.ErrNotFound) {
				return fmt.Errorf("task %d of job %q has no hold %q in %s (`checkpoints holds` lists them)", c.Task, job, c.Hold, c.Checkpoints)
			}
			return err
		}
		fmt.Fprintf(stdout, "released hold %s of task %d of job %s: the task goes on at its next restart\n", c.Hold, c.Task, job)
		return nil
	}
	return listHolds(ctx, st, c, stdout)
}

// holdRow is one hold as `checkpoints holds --json` prints it.
type holdRow struct {
	Job    string    `json:"job"`
	Task   int       `json:"task"`
	Name   string    `json:"name"`
	Time   time.Time `json:"time"`
	Reason string    `json:"reason"`
}

func listHolds(ctx context.Context, st checkpoint.Storage, c holdsConfig, out io.Writer) error {
	job := c.name()
	tasks := []int{c.Task}
	if c.Task < 0 {
		var err error
		if tasks, err = listTasks(ctx, st, job); err != nil {
			return err
		}
	}
	var rows []holdRow
	for _, task := range tasks {
		hs, err := checkpoint.Holds(ctx, st, job, task)
		if err != nil {
			return err
		}
		for _, h := range hs {
			rows = append(rows, holdRow{Job: job, Task: task, Name: h.Name, Time: h.Time, Reason: h.Reason})
		}
	}
	if c.JSON {
		enc := json.NewEncoder(out)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	if len(rows) == 0 {
		fmt.Fprintf(out, "no holds: no task of job %s is held\n", job)
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tHOLD\tSINCE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\n", r.Task, r.Name, r.Time.UTC().Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		fmt.Fprintf(out, "\ntask %d, hold %s: %s\n", r.Task, r.Name, r.Reason)
	}
	return nil
}
