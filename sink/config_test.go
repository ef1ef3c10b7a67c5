package sink

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestConfigValidate(t *testing.T) {
	enc := func(s string) (*kgo.Record, error) { return &kgo.Record{Value: []byte(s)}, nil }
	good := Config[string]{Brokers: []string{"b:9092"}, Topic: "out", Encode: enc}
	tests := []struct {
		name  string
		edit  func(*Config[string])
		wants []string // substrings of the error; none: valid
	}{
		{"defaults", func(*Config[string]) {}, nil},
		{"all set", func(c *Config[string]) {
			c.Delivery, c.PoolSize, c.TransactionTimeout, c.TransactionalIDPrefix = ExactlyOnce, 8, time.Minute, "p"
		}, nil},
		{"at-least-once", func(c *Config[string]) { c.Delivery = AtLeastOnce }, nil},
		{"everything missing", func(c *Config[string]) { *c = Config[string]{} }, []string{"Brokers:", "Topic:", "Encode:"}},
		{"empty broker", func(c *Config[string]) { c.Brokers = []string{" "} }, []string{"Brokers[0]"}},
		{"pool too small", func(c *Config[string]) { c.PoolSize = 2 }, []string{"PoolSize: 2, want at least 3"}},
		{"timeout negative", func(c *Config[string]) { c.TransactionTimeout = -1 }, []string{"TransactionTimeout"}},
		{"timeout below 1s", func(c *Config[string]) { c.TransactionTimeout = time.Millisecond }, []string{"TransactionTimeout: 1ms"}},
		{"unknown delivery", func(c *Config[string]) { c.Delivery = "twice" }, []string{`Delivery: "twice"`}},
		{"more topics", func(c *Config[string]) { c.Topics = []string{"rejects", "out"} }, nil},
		{"empty topic", func(c *Config[string]) { c.Topics = []string{"rejects", ""} }, []string{"Topics[1]: empty"}},
		{"watermarks to more topics", func(c *Config[string]) { c.Watermarks, c.Topics = true, []string{"rejects"} }, []string{"Topics: [rejects], but Watermarks"}},
		{"transactional settings without transactions", func(c *Config[string]) {
			c.Delivery, c.PoolSize, c.TransactionTimeout, c.TransactionalIDPrefix = None, 5, time.Minute, "p"
		}, []string{"TransactionalIDPrefix", "PoolSize", "TransactionTimeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.edit(&c)
			err := c.Validate()
			if len(tt.wants) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if _, err := Kafka(c); err != nil {
					t.Fatalf("Kafka: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if _, kerr := Kafka(c); kerr == nil {
				t.Error("Kafka accepted an invalid config")
			}
		})
	}
}

func TestParseDelivery(t *testing.T) {
	for in, want := range map[string]Delivery{"exactly-once": ExactlyOnce, " At-Least-Once": AtLeastOnce, "none": None} {
		if got, err := ParseDelivery(in); err != nil || got != want {
			t.Errorf("ParseDelivery(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseDelivery("exactly-twice"); err == nil {
		t.Error("ParseDelivery accepted exactly-twice")
	}
}

func TestCheckTimeout(t *testing.T) {
	tests := []struct {
		txn, interval time.Duration
		failures      int
		restart       time.Duration
		ok            bool
	}{
		{10 * time.Minute, 10 * time.Second, 3, time.Minute, true},
		{time.Minute, 10 * time.Second, 3, 20 * time.Second, false}, // 60s <= 40s + 20s
		{61 * time.Second, 10 * time.Second, 3, 20 * time.Second, true},
		{time.Minute, 0, 3, 0, false},
		{time.Minute, time.Second, -1, 0, false},
	}
	for _, tt := range tests {
		err := CheckTimeout(tt.txn, tt.interval, tt.failures, tt.restart)
		if (err == nil) != tt.ok {
			t.Errorf("CheckTimeout(%v, %v, %d, %v) = %v, want ok %v", tt.txn, tt.interval, tt.failures, tt.restart, err, tt.ok)
		}
		if err != nil && tt.interval > 0 && tt.failures >= 0 {
			for _, name := range []string{"transaction timeout", "checkpoint interval", "tolerable failures", "restart allowance"} {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("error %q does not name %s", err, name)
				}
			}
		}
	}
}
