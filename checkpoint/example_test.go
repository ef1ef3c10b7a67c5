package checkpoint_test

import (
	"fmt"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// The coordinator is driven by events and returns actions; here by hand.
func ExampleCoordinator() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := checkpoint.NewCoordinator(checkpoint.Config{Interval: 10 * time.Second}, []string{"source", "sink"}, 0, start)

	wake, _ := c.NextWake()
	for _, a := range c.Tick(wake) {
		fmt.Printf("%T %+v\n", a, a)
	}
	c.Ack(1, checkpoint.Ack{Operator: "source"}, wake.Add(time.Second))
	for _, a := range c.Ack(1, checkpoint.Ack{Operator: "sink"}, wake.Add(2*time.Second)) {
		w := a.(checkpoint.WriteManifest)
		fmt.Printf("WriteManifest %d, acks from %s and %s\n", w.ID, w.Acks[0].Operator, w.Acks[1].Operator)
	}
	for _, a := range c.ManifestWritten(1, wake.Add(3*time.Second)) {
		fmt.Printf("%T %+v\n", a, a)
	}
	// Output:
	// checkpoint.Trigger {ID:1 Timestamp:2026-01-01 00:00:10 +0000 UTC}
	// WriteManifest 1, acks from sink and source
	// checkpoint.NotifyComplete {ID:1 Duration:3s}
}
