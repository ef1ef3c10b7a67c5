// Package status is what a worker shows of itself: the document its
// /status.json serves ([Worker], with its [Task]s and the job's group as
// the coordinator describes it) and the page at / that renders the same
// document ([Render]): server-rendered, self-contained (inline CSS and SVG,
// no script), reloading itself every 5 seconds.
//
// It knows no Kafka and runs nothing. The worker keeps a [Task] per task it
// runs or ran, changes it as the task goes through its states (Restoring,
// Running, Stopping, Stopped, Superseded, Failed) and records each
// completed checkpoint with [Task.AddCheckpoint]; to serve, it copies what
// it knows into a [Worker] under its own locks and hands the copy over.
// The caller's duties: Tasks sorted by ID, each Task's Checkpoints oldest
// first, and Now set to the time of the copy (the page shows ages against
// it, never against the clock).
package status
