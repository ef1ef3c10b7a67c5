package status

import (
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// Task states, as the status page and /readyz see them.
const (
	Restoring  = "restoring"
	Running    = "running"
	Stopping   = "stopping"
	Stopped    = "stopped"
	Superseded = "superseded"
	Failed     = "failed"
)

// RecentCheckpoints is how many completed checkpoints of a task the status
// page keeps.
const RecentCheckpoints = 30

// Task is what the worker knows of one task it runs or ran.
type Task struct {
	ID    int       `json:"task"`
	State string    `json:"state"`
	Epoch int64     `json:"epoch"`
	Since time.Time `json:"since"`
	// RestoredFrom is the checkpoint the task restored (0: fresh start).
	RestoredFrom checkpoint.ID `json:"restored_from"`
	// Restore and FirstRecord are measured from the assignment.
	Restore     time.Duration `json:"restore_ns"`
	FirstRecord time.Duration `json:"first_record_ns"`
	Err         string        `json:"error,omitempty"`
	// Checkpoints are the newest completed checkpoints, oldest first.
	Checkpoints []Checkpoint                `json:"checkpoints"`
	Positions   []checkpoint.SourcePosition `json:"positions,omitempty"`
	// Assigned is when the worker was given the task: Restore and
	// FirstRecord are measured from it.
	Assigned time.Time `json:"-"`
}

// AddCheckpoint records c, the task's newest completed checkpoint, keeping
// the newest RecentCheckpoints.
func (t *Task) AddCheckpoint(c Checkpoint) {
	t.Checkpoints = append(t.Checkpoints, c)
	if n := len(t.Checkpoints); n > RecentCheckpoints {
		t.Checkpoints = append(t.Checkpoints[:0], t.Checkpoints[n-RecentCheckpoints:]...)
	}
}

// Checkpoint is one completed checkpoint on the status page.
type Checkpoint struct {
	ID          checkpoint.ID `json:"id"`
	Time        time.Time     `json:"time"`
	Duration    time.Duration `json:"duration_ns"`
	Size        int64         `json:"size"`
	Incremental int64         `json:"incremental"`
}

// Worker is what the status page and /status.json show of one worker.
type Worker struct {
	Job        string    `json:"job"`
	Name       string    `json:"name"`
	Input      string    `json:"input"`
	Output     string    `json:"output"`
	Group      string    `json:"group,omitempty"`
	Assignment string    `json:"assignment"`
	Started    time.Time `json:"started"`
	Now        time.Time `json:"now"`
	Ready      bool      `json:"ready"`
	ReadyWhy   string    `json:"ready_why"`
	Assigned   []int     `json:"assigned"`
	Tasks      []Task    `json:"tasks"`
	GroupState *Group    `json:"group_state,omitempty"`
	GroupErr   string    `json:"group_error,omitempty"`
	RecordsIn  int64     `json:"records_in"`
	RecordsOut int64     `json:"records_out"`
	// Stopped is why the job stopped on this worker for good (empty: it
	// runs), StoppedReason the reason label of weir_job_stopped.
	Stopped       string    `json:"stopped,omitempty"`
	StoppedReason string    `json:"stopped_reason,omitempty"`
	StoppedSince  time.Time `json:"stopped_since,omitzero"`
}

// Member is one member of the job's group, as DescribeGroups shows it.
type Member struct {
	ID       string `json:"id"`
	ClientID string `json:"client_id"`
	Host     string `json:"host"`
	HTTP     string `json:"http,omitempty"`
	Tasks    []int  `json:"tasks"`
	Epoch    int64  `json:"epoch"`
	Self     bool   `json:"self"`
}

// Group is the group as the coordinator describes it.
type Group struct {
	State      string   `json:"state"`
	Generation int32    `json:"generation"`
	Members    []Member `json:"members"`
}
