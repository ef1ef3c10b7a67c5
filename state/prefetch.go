package state

// Prefetcher is implemented by backends whose state accesses can be made to
// overlap: a lookup in a table larger than the CPU caches is a miss to DRAM
// (and usually a TLB miss) that stalls the record at hand, while the misses
// of a group of keys, issued back to back, are served in parallel. The
// runtime type-asserts a backend for it; a backend without it (Pebble) is
// used as is.
type Prefetcher interface {
	// Prefetch loads into the caches the memory that accesses to the given
	// keys will read first, in the tables accessed since the previous call.
	// The keys are concatenated in flat; key i ends at ends[i] and starts
	// where key i-1 ends. Prefetch only reads: it changes no state and no
	// snapshot, and the caller may reuse both slices once it returns. Like
	// every table call, it runs on the owner's goroutine.
	Prefetch(flat []byte, ends []int)
}

// Prefetch implements Prefetcher. Only tables looked up since the last call
// are touched, so that an operator with many declared tables and one hot
// path pays for the hot ones only.
func (m *Memory) Prefetch(flat []byte, ends []int) {
	for _, t := range m.order {
		vm := t.index()
		if !vm.used {
			continue
		}
		vm.used = false
		m.sink += vm.touch(flat, ends)
	}
}

// touch loads the hash word of each key's home slot, where its probe
// starts. Go has no prefetch instruction for user code; plain loads whose
// results are summed and kept (Memory.sink) do the same within the CPU's
// out-of-order window: they do not depend on each other, so their misses
// overlap. The keys are hashed first and the slots loaded in a second,
// tight loop, so that the window holds many loads and not the hashing. The
// probe of a lookup that follows starts on a cached line.
func (m *valueMap) touch(flat []byte, ends []int) uint32 {
	var acc uint32
	var home [touchGroup]uint32
	start := 0
	for len(ends) > 0 {
		n := min(len(ends), touchGroup)
		for j, end := range ends[:n] {
			home[j] = m.hash(flat[start:end]) & m.mask
			start = end
		}
		for _, i := range home[:n] {
			acc += m.chunks[i>>chunkBits][i&chunkMask].hash
		}
		ends = ends[n:]
	}
	return acc
}

// touchGroup is how many slots touch loads in one go.
const touchGroup = 64
