// Package checkpoint holds what a consistent snapshot is made of, knowing
// nothing of Kafka or of operators: the checkpoint coordinator (a pure state
// machine that takes events and returns actions), the manifest that is the
// commit point of a checkpoint, and the storage that holds manifests and state
// files (memory, file://, later s3://).
//
// Duties of the caller: drive the Coordinator from one goroutine, carry out the
// actions it returns in order, and feed back their outcome (ManifestWritten or
// ManifestFailed). A manifest is written once with Storage.PutIfAbsent and
// never rewritten; a checkpoint is complete only when its manifest is durable.
package checkpoint
