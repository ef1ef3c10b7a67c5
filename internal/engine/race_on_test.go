//go:build race

package engine_test

// raceScale shrinks the record counts of the long exactly-once tests
// under the race detector, which makes them several times slower; the
// shapes of their input stay the same.
const raceScale = 3
