package cli

import (
	"testing"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "4096": 4096, "64MiB": 64 << 20, "64M": 64 << 20, "64m": 64 << 20, "512KiB": 512 << 10,
		"512k": 512 << 10, "1GiB": 1 << 30, "1 G": 1 << 30, "7B": 7,
	} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "64MB", "1.5GiB", "-1", "64 bytes", "99999999999999999999"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", in, got)
		}
	}
	for n, want := range map[int64]string{64 << 20: "64MiB", 1 << 30: "1GiB", 3 << 10: "3KiB", 1000: "1000", 0: "0"} {
		if got := (Bytes{V: &n}).String(); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestEnvName(t *testing.T) {
	for flag, want := range map[string]string{
		"interval":           "WEIR_INTERVAL",
		"checkpoint-timeout": "WEIR_CHECKPOINT_TIMEOUT",
		"on-decode-error":    "WEIR_ON_DECODE_ERROR",
	} {
		if got := EnvName(flag); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", flag, got, want)
		}
	}
}
