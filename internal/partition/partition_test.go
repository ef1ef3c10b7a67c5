package partition

import (
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// keys returns keys of every length up to 64 (each remainder of murmur2's
// 4-byte words), random bytes and decimal ids, from a printed seed.
func keys(t *testing.T, n int) [][]byte {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed))
	out := [][]byte{{}, []byte("k0"), []byte("acc-7")}
	for i := range n {
		if i%2 == 0 {
			out = append(out, strconv.AppendInt(nil, r.Int64N(1<<40)-1<<39, 10))
			continue
		}
		k := make([]byte, r.IntN(65))
		for j := range k {
			k[j] = byte(r.Uint32())
		}
		out = append(out, k)
	}
	return out
}

// counts are partition counts: small ones, primes, powers of two, large.
var counts = []int{1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 31, 32, 50, 64, 100, 127, 1000, 4096, 65521, 1 << 20}

// TestMurmur2MatchesFranzGo: franz-go's default partitioner for keyed
// records (Kafka's Java client's, which franz-go mirrors) and Murmur2 agree
// on every key and count.
func TestMurmur2MatchesFranzGo(t *testing.T) {
	kp := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for _, k := range keys(t, 20000) {
		for _, n := range counts {
			want := kp.Partition(&kgo.Record{Key: k}, n)
			if got := Murmur2.Partition(k, n); got != want {
				t.Fatalf("key %q, %d partitions: Murmur2 says %d, franz-go %d", k, n, got, want)
			}
		}
	}
}

// TestMurmur2KafkaVectors: the hashes of Kafka's UtilsTest.testMurmur2, as
// Java's signed ints.
func TestMurmur2KafkaVectors(t *testing.T) {
	for key, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		if got := int32(murmur2([]byte(key))); got != want {
			t.Errorf("murmur2(%q) = %d, Kafka's is %d", key, got, want)
		}
	}
}

// crc32Bitwise is the CRC-32 of librdkafka's rdcrc32.h parameters, bit by
// bit: width 32, polynomial 0x04c11db7 reflected (0xedb88320), init and
// final xor 0xffffffff, reflected in and out.
func crc32Bitwise(b []byte) uint32 {
	crc := ^uint32(0)
	for _, c := range b {
		crc ^= uint32(c)
		for range 8 {
			if crc&1 == 1 {
				crc = crc>>1 ^ 0xedb88320
			} else {
				crc >>= 1
			}
		}
	}
	return ^crc
}

// TestCRC32MatchesLibrdkafka: librdkafka's consistent partitioner,
// crc32(key) % partition_cnt in unsigned arithmetic, from its published
// CRC parameters.
func TestCRC32MatchesLibrdkafka(t *testing.T) {
	if got := crc32Bitwise([]byte("123456789")); got != 0xcbf43926 {
		t.Fatalf("the test's CRC-32 of 123456789 is %#x, the standard check value 0xcbf43926", got)
	}
	for _, k := range keys(t, 20000) {
		for _, n := range counts {
			want := int(crc32Bitwise(k) % uint32(n))
			if got := CRC32.Partition(k, n); got != want {
				t.Fatalf("key %q, %d partitions: CRC32 says %d, librdkafka's algorithm %d", k, n, got, want)
			}
		}
	}
}

// TestFNV1aMatchesSarama: Sarama's NewHashPartitioner, as franz-go's
// SaramaCompatHasher reproduces it, over Go's FNV-1a.
func TestFNV1aMatchesSarama(t *testing.T) {
	sarama := kgo.SaramaCompatHasher(func(b []byte) uint32 {
		h := fnv.New32a()
		h.Write(b)
		return h.Sum32()
	})
	for _, k := range keys(t, 20000) {
		for _, n := range counts {
			if got, want := FNV1a.Partition(k, n), sarama(k, n); got != want {
				t.Fatalf("key %q, %d partitions: FNV1a says %d, Sarama %d", k, n, got, want)
			}
		}
	}
}

// TestFNV1aLibrdkafkaVectors: librdkafka's fnv1a partitioner, which says it
// matches Sarama's, hashes to abs(int32(fnv1a(key))); its unit test's
// values, each taken modulo a few counts, match FNV1a's partitions.
func TestFNV1aLibrdkafkaVectors(t *testing.T) {
	for key, abs := range map[string]uint32{
		"kafka":                                  0xd33c4e1,
		"giberish123456789":                      0x77a58295,
		"1234":                                   0x23bdd03,
		"234":                                    0x2dea3cd2,
		"34":                                     0x740fa83e,
		"4":                                      0x310ca263,
		"PreAmbleWillBeRemoved,ThePrePartThatIs": 0x65cbd69c,
		"":                                       0x7ee3623b,
	} {
		for _, n := range counts {
			if got, want := FNV1a.Partition([]byte(key), n), int(abs%uint32(n)); got != want {
				t.Errorf("key %q, %d partitions: FNV1a says %d, librdkafka %d", key, n, got, want)
			}
		}
	}
}

func TestParse(t *testing.T) {
	for _, p := range All {
		got, err := Parse(" " + p.String() + " ")
		if err != nil || got != p {
			t.Errorf("Parse(%q) = %v, %v", p.String(), got, err)
		}
	}
	if p, err := Parse("MURMUR2"); err != nil || p != Murmur2 {
		t.Errorf("Parse(MURMUR2) = %v, %v", p, err)
	}
	_, err := Parse("consistent_random")
	if err == nil || err.Error() != `partitioner "consistent_random", want murmur2, crc32 or fnv1a` {
		t.Errorf("Parse(consistent_random): %v", err)
	}
}

// BenchmarkPartition is the cost of one key check's hash, per key size:
// 8 bytes is a state.Int64 or Uint64 key, 16 a short string. The keys are
// written before the loop: a key written just before it is hashed (one
// byte changed per call) stalls the hash's 4-byte loads on the store.
func BenchmarkPartition(b *testing.B) {
	for _, p := range All {
		for _, size := range []int{8, 16, 64} {
			keys := make([][]byte, 1024)
			for i := range keys {
				keys[i] = make([]byte, size)
				for j := range keys[i] {
					keys[i][j] = byte(i*7 + j*31)
				}
			}
			b.Run(p.String()+"/"+strconv.Itoa(size), func(b *testing.B) {
				sum := 0
				for i := range b.N {
					sum += p.Partition(keys[i%len(keys)], 8)
				}
				if sum < 0 {
					b.Fatal(sum)
				}
			})
		}
	}
}
