//go:build !race

package runtime_test

const raceScale = 1
