// Package checkpoint holds what a consistent snapshot is made of, knowing
// nothing of Kafka or of operators: the checkpoint coordinator (a pure state
// machine that takes events and returns actions), the driver that runs it,
// the manifest that is the commit point of a checkpoint, and the storage that
// holds manifests and state files (memory, file://, s3://), and retention.
//
// The Coordinator decides; it has no goroutines, clocks or I/O. The Driver
// runs one Coordinator per task on one goroutine: it ticks it on time, feeds
// it the participants' Ack and Decline (which may come from any goroutine),
// calls the task's Executor for Trigger, NotifyComplete and NotifyAborted, and
// writes manifests.
//
// Duties of the caller: create the Coordinator with the highest checkpoint ID
// found in storage (ListCheckpoints), so IDs never repeat across restarts;
// give it every operator of the task as a participant, and have each of them
// Ack (or Decline) every checkpoint it sees the barrier of; cancel Run's
// context to stop, after TriggerNow and the NotifyComplete of the final
// checkpoint when shutting down cleanly. Whoever drives a Coordinator without
// a Driver carries out its actions in order and feeds back their outcome
// (ManifestWritten or ManifestFailed).
//
// A manifest is written once with Storage.PutIfAbsent and never rewritten; a
// checkpoint is complete only when its manifest is durable. Manifests carry a
// SHA-256 of their body (EncodeManifest) and state files a CRC-32C in their
// FileRef (PutFile), which readers verify (DecodeManifest, GetVerified); a
// mismatch wraps ErrCorrupt.
//
// Object layout under the storage root:
//
//	<job>/tasks/<task>/chk-<id, 20 digits>/manifest.json  commit point (ManifestName)
//	<job>/tasks/<task>/chk-<id, 20 digits>/e<epoch>-<attempt>/...
//	                                                       files of that checkpoint only, one folder per writer (OwnerDir)
//	<job>/tasks/<task>/owner-<epoch, 20 digits>            an owner's claim of the task (Claim)
//	<job>/tasks/<task>/hold-<name>                         what stops the task until an operator releases it (Hold)
//	<job>/shared/<task>/...                                immutable files shared by checkpoints (SharedDir)
//	<job>/epochs/<epoch, 20 digits>                        fencing epochs allocated (NextEpoch)
//	<job>/layout.json                                      the job's topics as its first run found them (Layout)
//
// A job's layout record is written once, like a manifest, and never
// rewritten: it is what this incarnation of the job (its checkpoints) was
// started on. Deleting it alone makes the next worker record the layout it
// finds, unchecked; delete it with the job's checkpoints, or not at all.
//
// How owners of a task are kept apart (OwnerDir, Claim, the Driver's check
// of the claims before it commits, NextEpoch) is in docs/ownership.md.
package checkpoint
