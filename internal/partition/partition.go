// Package partition says which partition a Kafka producer puts a record key
// in, for the partitioners that write the inputs of weir's jobs. A task of a
// job holds exactly the keys the input's partitioner sends to its partition
// (DESIGN.md, "The keyed invariant"), and its keyed operators check each
// record's key against the partitioner here.
//
// Each partitioner matches its client for every record that has a key: the
// same hash of the key bytes, the same arithmetic to a partition. A record
// without a key (null, not empty) goes where the client's sticky or random
// choice put it, which no function of the key can tell; so does a record
// with an empty key under librdkafka's consistent_random, its default.
//
// Duties of the caller: pass the key as the producer serialised it (weir
// takes the key codec's bytes, the Kafka Streams convention that one serde
// makes the record key and the state key) and n > 0.
package partition

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
)

// Partitioner maps a record key to one of n partitions as a producer does.
// Its methods are safe for concurrent use.
type Partitioner interface {
	// Partition is the partition of key among n > 0.
	Partition(key []byte, n int) int
	// String is its name, as Parse takes it.
	String() string
}

// The partitioners, by the clients that use them for keyed records.
var (
	// Murmur2 is Kafka's own: the Java client's default (and so Kafka
	// Streams'), franz-go's default, and librdkafka's murmur2 and
	// murmur2_random. The positive part of the 32-bit murmur2 hash, modulo
	// n.
	Murmur2 Partitioner = murmur2Partitioner{}
	// CRC32 is librdkafka's consistent and consistent_random, the default of
	// librdkafka and the clients built on it (confluent-kafka-go,
	// confluent-kafka-python, confluent-kafka-dotnet): the CRC-32 (IEEE) of
	// the key, unsigned, modulo n.
	CRC32 Partitioner = crc32Partitioner{}
	// FNV1a is Sarama's default (NewHashPartitioner), and librdkafka's fnv1a
	// and fnv1a_random: the 32-bit FNV-1a hash as a signed int32, modulo n,
	// made positive by negation. Sarama's NewReferenceHashPartitioner is not
	// this one.
	FNV1a Partitioner = fnv1aPartitioner{}
)

// All are the partitioners Parse knows, the default first.
var All = []Partitioner{Murmur2, CRC32, FNV1a}

// Parse returns the partitioner called name (case-insensitive).
func Parse(name string) (Partitioner, error) {
	for _, p := range All {
		if strings.EqualFold(strings.TrimSpace(name), p.String()) {
			return p, nil
		}
	}
	return nil, fmt.Errorf("partitioner %q, want %s", name, Names())
}

// Names lists the partitioners' names, for messages: "murmur2, crc32 or
// fnv1a".
func Names() string {
	var b strings.Builder
	for i, p := range All {
		switch {
		case i == len(All)-1 && i > 0:
			b.WriteString(" or ")
		case i > 0:
			b.WriteString(", ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

type murmur2Partitioner struct{}

func (murmur2Partitioner) String() string { return "murmur2" }

// Partition follows Kafka's BuiltInPartitioner.partitionForKey:
// Utils.toPositive(Utils.murmur2(key)) % n, where toPositive clears the
// sign bit.
func (murmur2Partitioner) Partition(key []byte, n int) int {
	return int((murmur2(key) & 0x7fffffff) % uint32(n))
}

// murmur2 is the 32-bit MurmurHash2 of Kafka's Utils.murmur2: seed
// 0x9747b28c, the key read as little-endian 32-bit words, the 1 to 3 bytes
// left over folded in last.
func murmur2(key []byte) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	h := uint32(seed) ^ uint32(len(key))
	for len(key) >= 4 {
		k := binary.LittleEndian.Uint32(key)
		k *= m
		k ^= k >> r
		k *= m
		h = h*m ^ k
		key = key[4:]
	}
	switch len(key) {
	case 3:
		h ^= uint32(key[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(key[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(key[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

type crc32Partitioner struct{}

func (crc32Partitioner) String() string { return "crc32" }

// Partition follows librdkafka's rd_kafka_msg_partitioner_consistent:
// rd_crc32(key) % partition_cnt, in unsigned arithmetic (the CRC is a
// uint32_t, so C converts the count to unsigned too).
func (crc32Partitioner) Partition(key []byte, n int) int {
	return int(crc32.ChecksumIEEE(key) % uint32(n))
}

type fnv1aPartitioner struct{}

func (fnv1aPartitioner) String() string { return "fnv1a" }

// Partition follows Sarama's hashPartitioner without referenceAbs:
// int32(fnv32a(key)) % n, negated when negative (Go's % truncates, so the
// remainder has the sign of the hash).
func (fnv1aPartitioner) Partition(key []byte, n int) int {
	const (
		offset = 2166136261
		prime  = 16777619
	)
	h := uint32(offset)
	for _, b := range key {
		h ^= uint32(b)
		h *= prime
	}
	p := int32(h) % int32(n)
	if p < 0 {
		p = -p
	}
	return int(p)
}
