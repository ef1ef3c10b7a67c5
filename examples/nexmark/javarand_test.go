package nexmark

import "testing"

// TestJavaRandom: the draws are java.util.Random's for these seeds, as
// Beam's and Flink's generators make them.
func TestJavaRandom(t *testing.T) {
	r := newJavaRandom(0)
	if a, b := r.nextInt(), r.nextInt(); a != -1155484576 || b != -723955400 {
		t.Errorf("new Random(0).nextInt() twice = %d, %d, want -1155484576, -723955400", a, b)
	}
	r = newJavaRandom(42)
	if v := r.nextInt(); v != -1170105035 {
		t.Errorf("new Random(42).nextInt() = %d, want -1170105035", v)
	}
	r = newJavaRandom(0)
	if v := r.float64(); v != 0.730967787376657 {
		t.Errorf("new Random(0).nextDouble() = %v, want 0.730967787376657", v)
	}
	r = newJavaRandom(42)
	if a, b := r.float64(), r.float64(); a != 0.7275636800328681 || b != 0.6832234717598454 {
		t.Errorf("new Random(42).nextDouble() twice = %v, %v, want 0.7275636800328681, 0.6832234717598454", a, b)
	}
	// Bounds: powers of two take the top bits, others reject the last
	// partial range; both stay in [0, bound).
	for _, bound := range []int32{1, 2, 13, 16, 1000, 1<<30 + 1} {
		r := newJavaRandom(int64(bound))
		for range 1000 {
			if v := r.intn(bound); v < 0 || v >= bound {
				t.Fatalf("intn(%d) = %d", bound, v)
			}
		}
	}
	r = newJavaRandom(7)
	for _, n := range []int64{1, 5, 1 << 31, 1 << 40} {
		if v := r.longn(n); v < 0 || v >= n {
			t.Errorf("longn(%d) = %d", n, v)
		}
	}
}
