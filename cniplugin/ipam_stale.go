package cniplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ErrNoSubnet means the node has no subnet to lease addresses from: it lost
// its subnet to another node and waits for the registry to give it a new
// one. Callers should retry later.
var ErrNoSubnet = errors.New("cniplugin: the node has no subnet (lost to another node; waiting for a new one)")

// StaleLease is a lease whose address left the node's subnet: the control
// plane gave the subnet to another node (the node was gone past its lease)
// and this node took a fresh one. The pod's interface is gone; CHECK fails
// with Reason until the runtime deletes the pod (DEL drops the record).
// Stale leases are kept on disk as DIR/stale/<IP>_<hash of the
// attachment>.json: two attachments can have held one address in turn.
type StaleLease struct {
	Lease
	Reason string `json:"reason"`

	file string // its name in DIR/stale
}

// staleFileName is the file of l's stale record.
func staleFileName(l *Lease) string {
	h := fnv.New32a()
	h.Write([]byte(l.Key()))
	return fmt.Sprintf("%s_%08x.json", l.IP, h.Sum32())
}

func (m *IPAM) staleDir() string { return filepath.Join(m.dir, "stale") }

// Resubnet makes sub the subnet new leases come from; an invalid sub (the
// node lost its subnet and has none yet) makes Allocate fail with
// ErrNoSubnet. Every lease outside sub becomes stale with reason (its file
// moves to DIR/stale) and frees its switch port. It returns the leases
// that became stale.
func (m *IPAM) Resubnet(sub netip.Prefix, reason string) ([]StaleLease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sub.IsValid() {
		if !sub.Addr().Is4() || sub.Bits() > 30 {
			return nil, fmt.Errorf("cniplugin: IPAM needs an IPv4 subnet of /30 or larger, not %v", sub)
		}
		sub = sub.Masked()
		m.cursor = sub.Addr().Next()
	}
	m.subnet = sub
	var out []StaleLease
	var errs []error
	for _, l := range m.byKey {
		if sub.IsValid() && m.usable(l.IP) {
			continue
		}
		if err := m.markStale(l, reason); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(m.byKey, l.Key())
		delete(m.byIP, l.IP)
		delete(m.ports, l.Port)
		out = append(out, *m.stale[l.Key()])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].IP.Less(out[j].IP) })
	return out, errors.Join(errs...)
}

// markStale records l as stale and moves its lease file to the stale
// directory; m.mu is held (or m is not shared yet).
func (m *IPAM) markStale(l *Lease, reason string) error {
	if err := os.MkdirAll(m.staleDir(), 0o755); err != nil {
		return fmt.Errorf("cniplugin: stale lease %s: %w", l.IP, err)
	}
	st := &StaleLease{Lease: *l, Reason: reason, file: staleFileName(l)}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(m.staleDir(), st.file)
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return fmt.Errorf("cniplugin: stale lease %s: %w", l.IP, err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("cniplugin: stale lease %s: %w", l.IP, err)
	}
	if err := os.Remove(filepath.Join(m.dir, l.IP.String()+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cniplugin: stale lease %s: %w", l.IP, err)
	}
	if m.stale == nil {
		m.stale = map[string]*StaleLease{}
	}
	m.stale[l.Key()] = st
	return nil
}

// loadStale reads DIR/stale (OpenIPAM).
func (m *IPAM) loadStale() error {
	ents, err := os.ReadDir(m.staleDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cniplugin: stale leases: %w", err)
	}
	var bad []string
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.staleDir(), e.Name()))
		var st StaleLease
		if err != nil || json.Unmarshal(b, &st) != nil || m.byKey[st.Key()] != nil {
			bad = append(bad, e.Name())
			continue
		}
		if m.stale == nil {
			m.stale = map[string]*StaleLease{}
		}
		st.file = e.Name()
		m.stale[st.Key()] = &st
	}
	if len(bad) > 0 {
		return fmt.Errorf("stale/%v unreadable or shadowed by a live lease", bad)
	}
	return nil
}

// Stale returns the stale lease of an attachment.
func (m *IPAM) Stale(containerID, ifName string) (StaleLease, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.stale[AttachmentKey(containerID, ifName)]
	if st == nil {
		return StaleLease{}, false
	}
	return *st, true
}

// StaleLeases lists the stale leases.
func (m *IPAM) StaleLeases() []StaleLease {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]StaleLease, 0, len(m.stale))
	for _, st := range m.stale {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].IP.Less(out[j].IP) })
	return out
}

// DropStale forgets an attachment's stale lease (DEL, GC); dropping an
// unknown one is not an error.
func (m *IPAM) DropStale(containerID, ifName string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dropStaleLocked(AttachmentKey(containerID, ifName))
}

func (m *IPAM) dropStaleLocked(key string) error {
	st := m.stale[key]
	if st == nil {
		return nil
	}
	if err := os.Remove(filepath.Join(m.staleDir(), st.file)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cniplugin: drop stale lease %s: %w", st.IP, err)
	}
	delete(m.stale, key)
	return nil
}
