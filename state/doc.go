// Package state keeps the keyed state of operators: typed handles (Value,
// List, Map) scoped to the current key, processing-time timers, and the
// backends that store them (memory, copy-on-write; Pebble, incremental) and
// snapshot them into checkpoint storage.
//
// A Backend belongs to one keyed operator of one task and is used from one
// goroutine: the one that runs that operator. Duties of the caller: declare
// every table before Restore, call Snapshot exactly at the barrier (the cut is
// the caller's), run Snapshot.Upload on any goroutine while processing goes on,
// and Release every snapshot it took.
package state
