package faultproxy

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// TCP is a fault proxy for a TCP service, such as one listener of a Kafka
// broker: it accepts at Addr and forwards each connection to its target,
// byte for byte, with the faults of a network link between them.
//
//   - A cut (Cut) stops every byte both ways, on the open connections and
//     on new ones, as a partition does: nothing is reset or closed, the
//     ends see silence until their own timeouts give up. What either end
//     sent meanwhile is delivered after the heal to an end that has not
//     given up, as TCP's retransmissions would; a new connection reaches
//     the target only after the heal.
//   - A slow link (Link) delays each chunk by a latency, without limiting
//     the rate: chunks are queued with the time they may go.
//   - A lossy link (Link) stalls a share of chunks, and all behind them,
//     for 200 ms to 2 s, as a lost segment's retransmission would.
type TCP struct {
	// Addr is where clients connect: host:port on 127.0.0.1.
	Addr   string
	target string
	ln     net.Listener

	mu     sync.Mutex
	healed chan struct{} // nil while the link is up; closed at the heal
	delay  time.Duration
	loss   float64
	rng    *rand.Rand
	conns  map[net.Conn]struct{}
	closed chan struct{}
	wg     sync.WaitGroup
}

// ListenTCP starts a proxy at addr ("127.0.0.1:0" for any port) in front
// of target. The link is up and clean until Cut or Link.
func ListenTCP(addr, target string, seed uint64) (*TCP, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen %s: %w", addr, err)
	}
	p := &TCP{
		Addr: ln.Addr().String(), target: target, ln: ln,
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		conns:  map[net.Conn]struct{}{},
		closed: make(chan struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Cut cuts the link (true) or heals it (false).
func (p *TCP) Cut(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.healed == nil:
		p.healed = make(chan struct{})
	case !on && p.healed != nil:
		close(p.healed)
		p.healed = nil
	}
}

// Link sets the latency added to each chunk and the share of chunks (0 to
// 1) that stall as if lost; zero values make the link clean again.
func (p *TCP) Link(delay time.Duration, loss float64) {
	p.mu.Lock()
	p.delay, p.loss = delay, loss
	p.mu.Unlock()
}

// Close stops accepting and closes every connection.
func (p *TCP) Close() {
	p.mu.Lock()
	select {
	case <-p.closed:
		p.mu.Unlock()
		return
	default:
	}
	close(p.closed)
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// up returns when the link is not cut: true, or false when the proxy
// closed first.
func (p *TCP) up() bool {
	for {
		p.mu.Lock()
		h := p.healed
		p.mu.Unlock()
		if h == nil {
			return true
		}
		select {
		case <-h:
		case <-p.closed:
			return false
		}
	}
}

// track adds c to the connections Close ends; false if the proxy closed.
func (p *TCP) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		c.Close()
		return false
	default:
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *TCP) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *TCP) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve connects client c to the target once the link is up, and pipes
// both ways until either end closes.
func (p *TCP) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	if !p.up() {
		return
	}
	u, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		return // the target is down (a broker restart): the client sees a close
	}
	if !p.track(u) {
		return
	}
	defer p.untrack(u)
	done := make(chan struct{}, 2)
	go func() { p.pipe(u, c); done <- struct{}{} }()
	go func() { p.pipe(c, u); done <- struct{}{} }()
	<-done
	// One direction ended: end the other too (the deferred closes), as a
	// broker or client closing its socket does.
	c.Close()
	u.Close()
	<-done
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst through the link's faults: a reader queues each
// chunk with the time it may go, a writer sends it then, once the link is
// up, after a loss stall if one is drawn.
func (p *TCP) pipe(dst, src net.Conn) {
	q := make(chan chunk, 64)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				p.mu.Lock()
				d := p.delay
				p.mu.Unlock()
				select {
				case q <- chunk{b: b[:n], due: time.Now().Add(d)}:
				case <-p.closed:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range q {
		if !p.wait(time.Until(ch.due)) || !p.up() {
			break
		}
		p.mu.Lock()
		var stall time.Duration
		if p.loss > 0 && p.rng.Float64() < p.loss {
			stall = time.Duration(200+p.rng.IntN(1800)) * time.Millisecond
		}
		p.mu.Unlock()
		if !p.wait(stall) {
			break
		}
		if _, err := dst.Write(ch.b); err != nil {
			break
		}
	}
	// Unblock the reader if the writer stopped first.
	src.Close()
	for range q {
	}
}

// wait sleeps d; false if the proxy closed first.
func (p *TCP) wait(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.closed:
		return false
	}
}
