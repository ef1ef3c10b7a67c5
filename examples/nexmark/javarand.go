package nexmark

// javaRandom is java.util.Random: the 48-bit linear congruential generator
// that Flink's and Beam's Nexmark generators seed with each event's id.
// Drawing the same numbers in the same order gives the same events (ids,
// choices, strings); values computed with floating point (prices) may differ
// in the last bit where Go's math.Pow and Java's Math.pow round apart.
type javaRandom struct{ seed int64 }

const (
	javaMultiplier = 0x5DEECE66D
	javaAddend     = 0xB
	javaMask       = 1<<48 - 1
)

func newJavaRandom(seed int64) javaRandom {
	return javaRandom{seed: (seed ^ javaMultiplier) & javaMask}
}

// next returns the next bits bits (1..32), as Java's protected next(bits).
func (r *javaRandom) next(bits uint) int32 {
	r.seed = (r.seed*javaMultiplier + javaAddend) & javaMask
	return int32(r.seed >> (48 - bits))
}

// nextInt is Java's nextInt(): 32 random bits.
func (r *javaRandom) nextInt() int32 { return r.next(32) }

// intn is Java's nextInt(bound): uniform in [0, bound), bound > 0. The
// rejection loop relies on int32 overflow, as Java's does.
func (r *javaRandom) intn(bound int32) int32 {
	v := r.next(31)
	m := bound - 1
	if bound&m == 0 {
		return int32((int64(bound) * int64(v)) >> 31)
	}
	for u := v; ; u = r.next(31) {
		v = u % bound
		if u-v+m >= 0 {
			return v
		}
	}
}

// int64 is Java's nextLong(): 64 bits from two draws.
func (r *javaRandom) int64() int64 {
	hi := int64(r.next(32))
	return hi<<32 + int64(r.next(32))
}

// float64 is Java's nextDouble(): 53 random bits in [0, 1).
func (r *javaRandom) float64() float64 {
	hi := int64(r.next(26))
	return float64(hi<<27+int64(r.next(27))) * (1.0 / (1 << 53))
}

// longn is Nexmark's LongGenerator.nextLong(random, n): uniform in [0, n)
// below 2^31 - 1, and the same skewed |nextLong() % n| above it.
func (r *javaRandom) longn(n int64) int64 {
	if n < 1<<31-1 {
		return int64(r.intn(int32(n)))
	}
	v := r.int64() % n
	if v < 0 {
		v = -v
	}
	return v
}
