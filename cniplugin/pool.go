package cniplugin

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/gvswitch/gvs/tap"
)

// TapPool keeps pre-created TAP devices (named gvsp<N>) in the node's
// namespace, as Kuryr keeps pre-created ports, so that ADD takes one
// instead of waiting on device creation. A background goroutine refills
// it. A pool of size 0 creates each device on demand.
type TapPool struct {
	size int
	tmpl tap.Config
	log  *slog.Logger

	mu     sync.Mutex
	free   []*tap.Device
	next   int
	closed bool
	kick   chan struct{}
	done   chan struct{}
}

// NewTapPool starts a pool of size devices made from tmpl (its Name is
// replaced). It must be called in the namespace where devices are created
// (the node's).
func NewTapPool(size int, tmpl tap.Config, log *slog.Logger) *TapPool {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &TapPool{size: size, tmpl: tmpl, log: log, kick: make(chan struct{}, 1), done: make(chan struct{})}
	if size > 0 {
		p.fill() // the first batch synchronously, so the first ADDs are fast
		go p.refill()
	} else {
		close(p.done)
	}
	return p
}

func (p *TapPool) create() (*tap.Device, error) {
	var lastErr error
	for range 16 { // skip names left over by someone else
		p.mu.Lock()
		name := fmt.Sprintf("gvsp%d", p.next)
		p.next++
		p.mu.Unlock()
		cfg := p.tmpl
		cfg.Name = name
		d, err := tap.Create(cfg)
		if err == nil {
			return d, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("cniplugin: create TAP: %w", lastErr)
}

func (p *TapPool) fill() {
	for {
		p.mu.Lock()
		need := !p.closed && len(p.free) < p.size
		p.mu.Unlock()
		if !need {
			return
		}
		d, err := p.create()
		if err != nil {
			p.log.Warn("TAP pool: refill failed", "err", err)
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			d.Close()
			return
		}
		p.free = append(p.free, d)
		p.mu.Unlock()
	}
}

func (p *TapPool) refill() {
	defer close(p.done)
	for range p.kick {
		p.fill()
	}
}

// Get returns a TAP device: a pooled one, or a new one when the pool is
// empty. The caller owns it (and closes it).
func (p *TapPool) Get() (*tap.Device, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 && !p.closed {
		d := p.free[n-1]
		p.free = p.free[:n-1]
		select { // under mu: Close closes kick under mu
		case p.kick <- struct{}{}:
		default:
		}
		p.mu.Unlock()
		return d, nil
	}
	p.mu.Unlock()
	return p.create()
}

// Len returns how many devices wait in the pool.
func (p *TapPool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// Close deletes the pooled devices and stops the refill.
func (p *TapPool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	free := p.free
	p.free = nil
	if p.size > 0 {
		close(p.kick)
	}
	p.mu.Unlock()
	<-p.done
	for _, d := range free {
		d.Close()
	}
}
