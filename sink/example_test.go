package sink_test

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/sink"
)

// The worker checks the sink's settings against its checkpoint configuration
// before it starts.
func ExampleCheckTimeout() {
	fmt.Println(sink.CheckTimeout(10*time.Minute, 10*time.Second, 3, time.Minute))
	fmt.Println(sink.CheckTimeout(time.Minute, 10*time.Second, 3, 30*time.Second))
	// Output:
	// <nil>
	// sink transaction timeout 1m0s is too short: it must exceed checkpoint interval 10s × (tolerable failures 3 + 1) + restart allowance 30s = 1m10s; raise the sink's TransactionTimeout (at most the broker's transaction.max.timeout.ms) or lower the checkpoint interval or tolerable failures
}

func ExampleCheckPoolSize() {
	fmt.Println(sink.CheckPoolSize(sink.DefaultPoolSize, 1))
	fmt.Println(sink.CheckPoolSize(sink.DefaultPoolSize, 2))
	// Output:
	// <nil>
	// sink pool size 5 is too small for 2 tolerable checkpoint failures: need at least 2 × tolerable failures + 3 = 7 transactional ids per task; raise the sink's PoolSize or lower tolerable failures
}

func ExampleKafka() {
	factory, err := sink.Kafka(sink.Config[string]{
		Brokers: []string{"127.0.0.1:9092"},
		Topic:   "greetings",
		Encode:  func(s string) (*kgo.Record, error) { return kgo.StringRecord(s), nil },
		// Delivery defaults to exactly-once: read the topic read_committed.
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = factory // runtime.Sink(port, "greetings", factory)

	_, err = sink.Kafka(sink.Config[string]{Topic: "greetings", PoolSize: 2})
	fmt.Println(err)
	// Output:
	// kafka sink: Brokers: empty, need at least one bootstrap address
	// Encode: nil encoder
	// PoolSize: 2, want at least 3 (or 0 for 5)
}
