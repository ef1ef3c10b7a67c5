// Command clicks is a weir worker for the clicks example job: clicks per
// user per minute in event time.
//
//	go run ./examples/clicks/cmd/clicks --brokers 127.0.0.1:9092 --input clicks --output clicks-per-minute
package main

import (
	_ "github.com/weirstream/weir/examples/clicks" // registers the job "clicks"
	"github.com/weirstream/weir/worker"
)

func main() { worker.Main() }
