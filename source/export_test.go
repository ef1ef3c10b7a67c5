package source

// Clients returns how many clients cs has open, and the readers of each.
func (cs *Consumers) Clients() []int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var refs []int
	for _, c := range cs.live {
		refs = append(refs, c.refs)
	}
	return refs
}
