//go:build race

package worker

// raceEnabled: the race detector multiplies memory and time.
const raceEnabled = true
