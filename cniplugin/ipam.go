package cniplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ErrSubnetExhausted means every host address of the subnet is leased.
var ErrSubnetExhausted = errors.New("cniplugin: node subnet exhausted")

// Lease is one attachment's address, kept on disk as DIR/<IP>.json.
type Lease struct {
	ContainerID string     `json:"containerID"`
	IfName      string     `json:"ifName"`
	IP          netip.Addr `json:"ip"`
	// Port is the switch port, stable across daemon restarts.
	Port    uint32    `json:"port"`
	Netns   string    `json:"netns"`
	Project string    `json:"project"`
	PodName string    `json:"podName,omitempty"`
	Network string    `json:"network,omitempty"`
	Created time.Time `json:"created"`
	// Bandwidth is the pod's bandwidth limit from the runtime (CNI
	// runtimeConfig.bandwidth), nil without one; kept with the lease so
	// that a restarted daemon applies it again.
	Bandwidth *Bandwidth `json:"bandwidth,omitempty"`
}

// Key is the attachment's identity: container ID and interface name.
func (l *Lease) Key() string { return AttachmentKey(l.ContainerID, l.IfName) }

// AttachmentKey is the key of an attachment.
func AttachmentKey(containerID, ifName string) string { return containerID + "/" + ifName }

// IPAM hands out the node subnet's host addresses (not the network
// address, not the gateway base+1, not the broadcast) and switch ports,
// one lease file per address, written atomically (temp file + rename).
// It is safe for concurrent use.
type IPAM struct {
	dir       string
	subnet    netip.Prefix
	firstPort uint32

	mu     sync.Mutex
	byKey  map[string]*Lease
	byIP   map[netip.Addr]*Lease
	ports  map[uint32]bool
	cursor netip.Addr
	// stale are leases whose address left the node's subnet (ipam_stale.go).
	stale map[string]*StaleLease
	// released holds, for each address released and not leased since,
	// the pod that had it (podKey), so that a pod whose sandbox is made
	// again (a node rebooted, a sandbox that died) gets its address back.
	// It never holds more entries than the subnet has addresses.
	released map[netip.Addr]string
}

// podKey names a pod's interface across its sandboxes ("" for a lease
// without a pod name).
func podKey(l *Lease) string {
	if l.PodName == "" {
		return ""
	}
	return l.Project + "/" + l.PodName + "/" + l.IfName
}

// OpenIPAM loads the leases under dir (creating it) for subnet; switch
// ports start at firstPort. Lease files outside the subnet are kept on
// disk but ignored, with an error listing them.
func OpenIPAM(dir string, subnet netip.Prefix, firstPort uint32) (*IPAM, error) {
	if !subnet.Addr().Is4() || subnet.Bits() > 30 {
		return nil, fmt.Errorf("cniplugin: IPAM needs an IPv4 subnet of /30 or larger, not %v", subnet)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cniplugin: IPAM dir: %w", err)
	}
	m := &IPAM{dir: dir, subnet: subnet.Masked(), firstPort: firstPort,
		byKey: map[string]*Lease{}, byIP: map[netip.Addr]*Lease{}, ports: map[uint32]bool{}, released: map[netip.Addr]string{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cniplugin: IPAM dir: %w", err)
	}
	var bad []string
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".tmp-") {
			_ = os.Remove(filepath.Join(dir, name)) // an interrupted write
			continue
		}
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("cniplugin: lease %s: %w", name, err)
		}
		var l Lease
		if err := json.Unmarshal(b, &l); err == nil && l.IP.Is4() && !m.subnet.Contains(l.IP) && l.IP.String()+".json" == name {
			// The node's subnet changed while the daemon was down.
			if m.markStale(&l, fmt.Sprintf("address %s is outside the node's subnet %v", l.IP, m.subnet)) == nil {
				continue
			}
		}
		if err := json.Unmarshal(b, &l); err != nil || !m.usable(l.IP) || l.IP.String()+".json" != name ||
			m.byKey[l.Key()] != nil || m.ports[l.Port] || l.Port < firstPort {
			bad = append(bad, name)
			continue
		}
		m.add(&l)
	}
	m.cursor = m.subnet.Addr().Next()
	if err := m.loadStale(); err != nil {
		bad = append(bad, err.Error())
	}
	if len(bad) > 0 {
		return m, fmt.Errorf("cniplugin: ignoring lease files in %s that are unreadable, duplicate or outside %v: %v", dir, subnet, bad)
	}
	return m, nil
}

func (m *IPAM) usable(ip netip.Addr) bool {
	if !ip.Is4() || !m.subnet.Contains(ip) {
		return false
	}
	base := m.subnet.Addr()
	return ip != base && ip != base.Next() && ip != last(m.subnet)
}

func last(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= 1<<(32-p.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func (m *IPAM) add(l *Lease) {
	m.byKey[l.Key()] = l
	m.byIP[l.IP] = l
	m.ports[l.Port] = true
}

// Allocate leases an address and the lowest free port to l, and persists
// the lease. The address is the one the same pod (namespace, name and
// interface) last had, if this IPAM released it and has not leased it
// since (the kubelet recreating a pod's sandbox, after a node reboot or a
// sandbox's death, DELs the old one first), else the next free one
// (round robin, so a released address is not handed out again at once to
// another pod). l's IP and Port are set on return. It fails with
// ErrSubnetExhausted when no address is free.
func (m *IPAM) Allocate(l Lease) (Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byKey[l.Key()] != nil {
		return Lease{}, fmt.Errorf("cniplugin: %s already has a lease", l.Key())
	}
	if !m.subnet.IsValid() {
		return Lease{}, ErrNoSubnet
	}
	ip, ok := m.releasedTo(podKey(&l))
	if !ok {
		ip, ok = m.nextFree()
	}
	if !ok {
		return Lease{}, fmt.Errorf("%w: all addresses of %v are leased (%d attachments)", ErrSubnetExhausted, m.subnet, len(m.byIP))
	}
	port := m.firstPort
	for m.ports[port] {
		port++
	}
	l.IP, l.Port = ip, port
	if l.Created.IsZero() {
		l.Created = time.Now().UTC()
	}
	if err := m.write(&l); err != nil {
		return Lease{}, err
	}
	m.cursor = ip
	m.add(&l)
	delete(m.released, ip)
	m.dropStaleLocked(l.Key())
	return l, nil
}

// releasedTo returns the free address pod (a podKey) had last, if any.
func (m *IPAM) releasedTo(pod string) (netip.Addr, bool) {
	if pod == "" {
		return netip.Addr{}, false
	}
	for ip, p := range m.released {
		if p == pod && m.usable(ip) && m.byIP[ip] == nil {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func (m *IPAM) nextFree() (netip.Addr, bool) {
	ip := m.cursor
	for range 1 << (32 - m.subnet.Bits()) {
		ip = ip.Next()
		if !m.subnet.Contains(ip) {
			ip = m.subnet.Addr()
		}
		if m.usable(ip) && m.byIP[ip] == nil {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func (m *IPAM) write(l *Lease) error {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(m.dir, ".tmp-")
	if err != nil {
		return fmt.Errorf("cniplugin: write lease: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(m.dir, l.IP.String()+".json"))
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("cniplugin: write lease %s: %w", l.IP, err)
	}
	return nil
}

// Get returns the lease of an attachment.
func (m *IPAM) Get(containerID, ifName string) (Lease, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.byKey[AttachmentKey(containerID, ifName)]
	if l == nil {
		return Lease{}, false
	}
	return *l, true
}

// Release removes an attachment's lease; releasing an unknown one is not
// an error.
func (m *IPAM) Release(containerID, ifName string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.byKey[AttachmentKey(containerID, ifName)]
	if l == nil {
		return nil
	}
	if err := os.Remove(filepath.Join(m.dir, l.IP.String()+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cniplugin: release %s: %w", l.IP, err)
	}
	delete(m.byKey, l.Key())
	delete(m.byIP, l.IP)
	delete(m.ports, l.Port)
	if k := podKey(l); k != "" {
		for ip, p := range m.released {
			if p == k {
				delete(m.released, ip) // an older sandbox's: the latest address is the one to give back
			}
		}
		m.released[l.IP] = k
	}
	return nil
}

// Leases lists every lease.
func (m *IPAM) Leases() []Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Lease, 0, len(m.byKey))
	for _, l := range m.byKey {
		out = append(out, *l)
	}
	return out
}

// Subnet is the subnet leases come from.
func (m *IPAM) Subnet() netip.Prefix { return m.subnet }
