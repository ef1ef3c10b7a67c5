//go:build !race

package engine_test

const raceScale = 1
