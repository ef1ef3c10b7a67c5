package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/worker"
)

// `processor checkpoints list|inspect` reads manifests from checkpoint
// storage and prints them; it writes nothing and needs no Kafka. It shows
// completed checkpoints (those with a manifest). Whether the newest one is
// also valid (its pending transactions still committable) only the broker
// knows; a restoring task asks it.

const checkpointsUsage = `usage: processor checkpoints <list|inspect|record|holds|release> [flags]

  list     completed checkpoints of a job per task: time, sizes, source positions,
           pending transactions; the newest of each task is marked
  inspect  one checkpoint's manifest: operators, files, positions, transactions
  record   record what became of a checkpoint's transactions that the broker
           forgot, found in the output topics or told with --outcome (writes)
  holds    the holds of a job's tasks: what stops a task until an operator
           releases it, and why
  release  release a task's hold, once done what it says (writes)

processor checkpoints <subcommand> -h lists the flags.
`

// checkpointsConfig is the configuration of `processor checkpoints`.
type checkpointsConfig struct {
	Checkpoints string
	Name        string
	// Job stands in for Name when that is unset, as with `run` (so that
	// the worker's own environment, WEIR_JOB without WEIR_NAME, names it).
	Job  string
	Task int // -1: every task (list only)
	ID   string
	JSON bool
}

func (c *checkpointsConfig) name() string {
	if c.Name == "" {
		return c.Job
	}
	return c.Name
}

func (c *checkpointsConfig) validate(inspect bool) error {
	var errs []error
	if err := worker.CheckCheckpointsURI(c.Checkpoints); err != nil {
		errs = append(errs, fmt.Errorf("--checkpoints: %w", err))
	} else if c.Checkpoints == "memory" || c.Checkpoints == "memory://" {
		errs = append(errs, errors.New("--checkpoints: memory storage lives inside the process that wrote it; name a file:// or s3:// storage"))
	}
	switch n := c.name(); {
	case n == "":
		errs = append(errs, errors.New("--name: required: the job instance name (run's --name, or its --job if --name was not set)"))
	case !worker.ValidName(n):
		errs = append(errs, fmt.Errorf("--name: %q, want letters, digits, '.', '_' or '-'", n))
	}
	if inspect {
		if c.Task < 0 {
			errs = append(errs, errors.New("--task: required: the task (input partition) of the checkpoint"))
		}
		if c.ID == "" {
			errs = append(errs, errors.New("--id: required: a checkpoint id (see checkpoints list) or latest"))
		} else if _, _, err := c.id(); err != nil {
			errs = append(errs, fmt.Errorf("--id: %w", err))
		}
	} else if c.Task < -1 {
		errs = append(errs, fmt.Errorf("--task: %d is negative", c.Task))
	}
	return errors.Join(errs...)
}

// id parses ID: a checkpoint id, or latest.
func (c *checkpointsConfig) id() (id checkpoint.ID, latest bool, err error) {
	if strings.EqualFold(c.ID, "latest") {
		return 0, true, nil
	}
	n, err := strconv.ParseUint(c.ID, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%q, want a checkpoint id (a number) or latest", c.ID)
	}
	return checkpoint.ID(n), false, nil
}

// registerStorage registers the flags that name a job's checkpoint
// storage, which every checkpoints subcommand takes.
func (c *checkpointsConfig) registerStorage(fs *flag.FlagSet) {
	fs.StringVar(&c.Checkpoints, "checkpoints", c.Checkpoints, "checkpoint storage: file:///path or s3://bucket/prefix[?region=R&endpoint=URL&path_style=true], as given to run")
	fs.StringVar(&c.Name, "name", c.Name, "job instance name, as given to run (default: --job)")
	fs.StringVar(&c.Job, "job", c.Job, "the job, standing in for --name when that is unset (as in run)")
}

// openStorage opens checkpoint storage for a subcommand. Reading must not
// create: checkpoint.Open makes a file:// root that does not exist, and a
// mistyped path would then just look empty.
func openStorage(ctx context.Context, uri string) (checkpoint.Storage, error) {
	if dir, ok := strings.CutPrefix(uri, "file://"); ok {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return nil, cli.UsageError{Err: fmt.Errorf("--checkpoints: %s is not a directory", dir)}
		}
	}
	st, err := checkpoint.Open(ctx, uri)
	if err != nil {
		return nil, cli.UsageError{Err: fmt.Errorf("--checkpoints: %w", err)}
	}
	return st, nil
}

func checkpointsCommand(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, checkpointsUsage)
		return cli.UsageError{Err: errors.New("checkpoints: want a subcommand: list, inspect, record, holds or release")}
	}
	sub, args := args[0], args[1:]
	var inspect bool
	switch sub {
	case "list":
	case "inspect":
		inspect = true
	case "record":
		return recordCommand(ctx, args, lookup, stdout, stderr)
	case "holds", "release":
		return holdsCommand(ctx, args, lookup, stdout, stderr, sub == "release")
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, checkpointsUsage)
		return nil
	default:
		return cli.UsageError{Err: fmt.Errorf("checkpoints: unknown subcommand %q, want list, inspect, record, holds or release", sub)}
	}

	c := checkpointsConfig{Checkpoints: worker.DefaultConfig().Checkpoints, Job: "", Task: -1}
	synopsis := "List the completed checkpoints of a job, per task, newest marked."
	if inspect {
		synopsis = "Print the manifest of one checkpoint of one task (--id N, or --id latest)."
	}
	fs := cli.NewFlagSet("processor checkpoints "+sub, synopsis, stderr)
	c.registerStorage(fs)
	if inspect {
		fs.IntVar(&c.Task, "task", c.Task, "task (input partition) of the checkpoint (required)")
		fs.StringVar(&c.ID, "id", c.ID, "checkpoint id, or latest (required)")
	} else {
		fs.IntVar(&c.Task, "task", c.Task, "only this task (default: every task with checkpoints)")
	}
	fs.BoolVar(&c.JSON, "json", c.JSON, "print JSON (list: one object per checkpoint; inspect: the manifest)")
	if err := cli.Parse(fs, args, lookup); err != nil {
		return err
	}
	if err := c.validate(inspect); err != nil {
		return cli.UsageError{Err: err}
	}
	st, err := openStorage(ctx, c.Checkpoints)
	if err != nil {
		return err
	}
	if inspect {
		return inspectCheckpoint(ctx, st, c, stdout)
	}
	return listCheckpoints(ctx, st, c, stdout)
}

// --- list ----------------------------------------------------------------------

// checkpointSummary is one line of `checkpoints list`, and its JSON object.
// The fields it shares with checkpoint.Manifest have the manifest's JSON
// names.
type checkpointSummary struct {
	Job         string                      `json:"job"`
	Task        int                         `json:"task"`
	Checkpoint  checkpoint.ID               `json:"checkpoint"`
	Timestamp   time.Time                   `json:"timestamp"`
	Epoch       int64                       `json:"epoch"`
	Version     int                         `json:"version"`
	Newest      bool                        `json:"newest"`
	Size        int64                       `json:"size"`        // full size of the task's state
	Incremental int64                       `json:"incremental"` // uploaded anew by this checkpoint
	Sources     []checkpoint.SourcePosition `json:"sources"`
	// Committables are the transactions pre-committed for this checkpoint,
	// committed once it completed (or by the restore that resumes them).
	Committables []checkpoint.Committable `json:"committables"`
	// Error is set instead of the above when the manifest is unreadable.
	Error string `json:"error,omitempty"`
}

func summarize(m checkpoint.Manifest) checkpointSummary {
	s := checkpointSummary{Job: m.Job, Task: m.Task, Checkpoint: m.Checkpoint, Timestamp: m.Timestamp,
		Epoch: m.Epoch, Version: m.Version, Sources: []checkpoint.SourcePosition{}, Committables: []checkpoint.Committable{}}
	s.Size, s.Incremental = stateSizes(m)
	for _, a := range m.Operators {
		s.Sources = append(s.Sources, a.Sources...)
		s.Committables = append(s.Committables, a.Committables...)
	}
	return s
}

// stateSizes sums the operators' state: the full size and what the
// checkpoint uploaded anew.
func stateSizes(m checkpoint.Manifest) (full, incremental int64) {
	for _, a := range m.Operators {
		if a.State != nil {
			full += a.State.Size
			incremental += a.State.Incremental
		}
	}
	return full, incremental
}

// taskList is what list found of one task.
type taskList struct {
	task     int
	rows     []checkpointSummary
	highest  checkpoint.ID // highest id with a folder, completed or not
	unread   int           // manifests that could not be read
	notFound bool
	holds    []string // what stops the task until released (checkpoint.Hold)
}

func listCheckpoints(ctx context.Context, st checkpoint.Storage, c checkpointsConfig, out io.Writer) error {
	job := c.name()
	tasks := []int{c.Task}
	if c.Task < 0 {
		var err error
		if tasks, err = listTasks(ctx, st, job); err != nil {
			return err
		}
		if len(tasks) == 0 {
			return fmt.Errorf("no checkpoints of job %q in %s", job, c.Checkpoints)
		}
	}
	var lists []taskList
	for _, task := range tasks {
		l, err := checkpoint.ListTask(ctx, st, job, task)
		if err != nil {
			return err
		}
		tl := taskList{task: task, highest: l.Highest, holds: l.Holds}
		for _, id := range l.Completed {
			m, err := checkpoint.ReadManifest(ctx, st, job, task, id)
			switch {
			case errors.Is(err, checkpoint.ErrNotFound):
				continue // deleted by retention since the listing
			case err != nil:
				tl.unread++
				tl.rows = append(tl.rows, checkpointSummary{Job: job, Task: task, Checkpoint: id, Error: err.Error()})
				continue
			}
			tl.rows = append(tl.rows, summarize(m))
		}
		for i := len(tl.rows) - 1; i >= 0; i-- {
			if tl.rows[i].Error == "" {
				tl.rows[i].Newest = true
				break
			}
		}
		tl.notFound = len(tl.rows) == 0
		lists = append(lists, tl)
	}

	if c.JSON {
		rows := []checkpointSummary{}
		for _, tl := range lists {
			rows = append(rows, tl.rows...)
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return err
		}
	} else {
		printList(out, job, c.Checkpoints, lists)
	}

	var errs []error
	for _, tl := range lists {
		if tl.unread > 0 {
			errs = append(errs, fmt.Errorf("task %d: %d unreadable manifests", tl.task, tl.unread))
		}
	}
	if len(lists) == 1 && lists[0].notFound {
		errs = append(errs, fmt.Errorf("task %d of job %q has no completed checkpoints in %s", lists[0].task, job, c.Checkpoints))
	}
	return errors.Join(errs...)
}

// listTasks returns the tasks of job that have checkpoint folders.
func listTasks(ctx context.Context, st checkpoint.Storage, job string) ([]int, error) {
	prefix := job + "/tasks/"
	names, err := st.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list tasks of job %q: %w", job, err)
	}
	var tasks []int
	for _, name := range names {
		dir, _, ok := strings.Cut(strings.TrimPrefix(name, prefix), "/")
		if !ok {
			continue
		}
		if t, err := strconv.Atoi(dir); err == nil && t >= 0 {
			tasks = append(tasks, t)
		}
	}
	slices.Sort(tasks)
	return slices.Compact(tasks), nil
}

const timeLayout = "2006-01-02 15:04:05.000"

func printList(out io.Writer, job, uri string, lists []taskList) {
	fmt.Fprintf(out, "job %s, checkpoints in %s (times UTC; * newest completed checkpoint of its task)\n\n", job, uri)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tID\tTIME\tSIZE\tINCREMENTAL\tSOURCE POSITIONS\tPENDING TRANSACTIONS (id producer/epoch)")
	for _, tl := range lists {
		if len(tl.rows) == 0 {
			fmt.Fprintf(tw, "%d\t-\tno completed checkpoints\t\t\t\t\n", tl.task)
		}
		for _, r := range tl.rows {
			mark := ""
			if r.Newest {
				mark = "*"
			}
			if r.Error != "" {
				fmt.Fprintf(tw, "%d\t%d\tunreadable: %s\t\t\t\t\n", r.Task, r.Checkpoint, r.Error)
				continue
			}
			fmt.Fprintf(tw, "%d\t%d%s\t%s\t%s\t%s\t%s\t%s\n", r.Task, r.Checkpoint, mark,
				r.Timestamp.UTC().Format(timeLayout), byteSize(r.Size), byteSize(r.Incremental),
				orDash(positionsText(r.Sources)), orDash(committablesText(r.Committables)))
		}
	}
	tw.Flush()
	for _, tl := range lists {
		if n := len(tl.rows); n > 0 && tl.highest > tl.rows[n-1].Checkpoint {
			fmt.Fprintf(out, "task %d: checkpoint %d was started after the newest and has no manifest (in progress, aborted or cut short)\n", tl.task, tl.highest)
		}
		if len(tl.holds) > 0 {
			fmt.Fprintf(out, "task %d is held (%s): it does not start until released; `checkpoints holds` says why\n", tl.task, strings.Join(tl.holds, ", "))
		}
	}
}

// positionsText writes positions as topic/partition@offset.
func positionsText(ps []checkpoint.SourcePosition) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprintf("%s/%d@%d", p.Topic, p.Partition, p.Offset)
	}
	return strings.Join(s, " ")
}

// committablesText writes committables as transactional-id producer/epoch.
func committablesText(cs []checkpoint.Committable) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = fmt.Sprintf("%s %d/%d", c.TransactionalID, c.ProducerID, c.Epoch)
	}
	return strings.Join(s, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// --- inspect -------------------------------------------------------------------

func inspectCheckpoint(ctx context.Context, st checkpoint.Storage, c checkpointsConfig, out io.Writer) error {
	job := c.name()
	ids, _, err := checkpoint.ListCheckpoints(ctx, st, job, c.Task)
	if err != nil {
		return err
	}
	id, latest, _ := c.id()
	if latest {
		if len(ids) == 0 {
			return fmt.Errorf("task %d of job %q has no completed checkpoints in %s", c.Task, job, c.Checkpoints)
		}
		id = ids[len(ids)-1]
	}
	m, err := checkpoint.ReadManifest(ctx, st, job, c.Task, id)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return fmt.Errorf("checkpoint %d of job %q task %d not found in %s (%s)", id, job, c.Task, c.Checkpoints, completedText(ids))
	}
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	}
	newest := len(ids) > 0 && ids[len(ids)-1] == id
	printManifest(out, m, c.Checkpoints, checkpoint.ManifestName(job, c.Task, id), newest, len(ids))
	return nil
}

func completedText(ids []checkpoint.ID) string {
	if len(ids) == 0 {
		return "the task has no completed checkpoints"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(uint64(id), 10)
	}
	return "completed: " + strings.Join(s, ", ")
}

func printManifest(out io.Writer, m checkpoint.Manifest, uri, name string, newest bool, completed int) {
	full, incr := stateSizes(m)
	which := "not the newest"
	if newest {
		which = "the newest"
	}
	fmt.Fprintf(out, "checkpoint %d of job %s, task %d (%s of %d completed)\n", m.Checkpoint, m.Job, m.Task, which, completed)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  storage\t%s\n", uri)
	fmt.Fprintf(tw, "  manifest\t%s\n", name)
	fmt.Fprintf(tw, "  time\t%s UTC\n", m.Timestamp.UTC().Format(timeLayout))
	fmt.Fprintf(tw, "  epoch\t%d\n", m.Epoch)
	fmt.Fprintf(tw, "  version\t%d\n", m.Version)
	fmt.Fprintf(tw, "  state\t%s full, %s incremental (uploaded by this checkpoint)\n", byteSize(full), byteSize(incr))
	tw.Flush()

	fmt.Fprintf(out, "\noperators (%d):\n", len(m.Operators))
	for _, a := range m.Operators {
		fmt.Fprintf(out, "  %s\n", a.Operator)
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		if a.Alignment > 0 {
			fmt.Fprintf(tw, "    alignment\t%v\n", a.Alignment)
		}
		for _, p := range a.Sources {
			fmt.Fprintf(tw, "    position\t%s/%d@%d\t(source %s)\n", p.Topic, p.Partition, p.Offset, p.Source)
		}
		for _, c := range a.Committables {
			fmt.Fprintf(tw, "    pending transaction\t%s\tproducer id %d\tepoch %d\n", c.TransactionalID, c.ProducerID, c.Epoch)
		}
		for _, c := range a.Committed {
			fmt.Fprintf(tw, "    committed before\t%s\tproducer id %d\tepoch %d\n", c.TransactionalID, c.ProducerID, c.Epoch)
		}
		if a.State != nil {
			fmt.Fprintf(tw, "    state\t%s backend, %d files, %s full, %s incremental\n",
				a.State.Backend, len(a.State.Files), byteSize(a.State.Size), byteSize(a.State.Incremental))
		}
		if len(a.Sources) == 0 && len(a.Committables) == 0 && len(a.Committed) == 0 && a.State == nil {
			fmt.Fprintf(tw, "    (nothing to restore)\n")
		}
		tw.Flush()
		if a.State != nil && len(a.State.Files) > 0 {
			printFiles(out, a.State.Files)
		}
	}
	var cs []checkpoint.Committable
	for _, a := range m.Operators {
		cs = append(cs, a.Committables...)
	}
	fmt.Fprintf(out, "\npending transactions: %d", len(cs))
	if len(cs) > 0 {
		fmt.Fprint(out, " (committed when this checkpoint completed, or resumed and committed by a restore from it)")
	}
	fmt.Fprintln(out)
}

// printFiles prints a state handle's files, sizes right-aligned in bytes.
func printFiles(out io.Writer, files []checkpoint.FileRef) {
	width := len("SIZE")
	for _, f := range files {
		width = max(width, len(strconv.FormatInt(f.Size, 10)))
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "      %*s\tSHARED\tCHECKSUM\tLOCAL\tOBJECT\n", width, "SIZE")
	for _, f := range files {
		shared := "no"
		if f.Shared {
			shared = "shared"
		}
		sum := "crc32c:" + f.CRC32C
		if f.CRC32C == "" {
			sum = "sha256:" + f.SHA256
		}
		if len(sum) > 19 {
			sum = sum[:19] + "…"
		}
		fmt.Fprintf(tw, "      %*d\t%s\t%s\t%s\t%s\n", width, f.Size, shared, sum, orDash(f.Local), f.Name)
	}
	tw.Flush()
}
