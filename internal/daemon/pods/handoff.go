package pods

import (
	"github.com/gvswitch/gvs/tap"
)

// A live upgrade (internal/daemon's handoff.go) moves the CNI pods' TAP
// queues from the running daemon to its successor: HandoffPods lists them
// in the old one, Inherit gives them to the new one's Adopt.

// HandedPod is a CNI pod's TAP for a live upgrade.
type HandedPod struct {
	ContainerID, IfName, Netns string
	Port                       uint32
	// Fds are its queues' descriptors, queue 0 first; they stay the
	// switch's.
	Fds []int
}

// HandoffPods lists the CNI pods' TAP queues. Static pods are not listed.
func (m *Manager) HandoffPods() []HandedPod {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []HandedPod
	for _, p := range m.pods {
		if p.ContainerID == "" || p.dev == nil {
			continue
		}
		hp := HandedPod{ContainerID: p.ContainerID, IfName: p.IfName, Netns: p.Netns, Port: p.Port, Fds: []int{p.dev.Fd()}}
		for _, q := range p.extra {
			hp.Fds = append(hp.Fds, q.Fd())
		}
		out = append(out, hp)
	}
	return out
}

// Inherit gives Adopt the queues of a pod's TAP that the running daemon
// handed over: Adopt of that pod takes them instead of attaching to the
// TAP. The Manager owns them; DropInherited closes those not taken.
func (m *Manager) Inherit(containerID, ifName string, queues []*tap.Device) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inherited == nil {
		m.inherited = map[string][]*tap.Device{}
	}
	m.inherited[containerID+"/"+ifName] = queues
}

func (m *Manager) takeInherited(containerID, ifName string) []*tap.Device {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := containerID + "/" + ifName
	qs := m.inherited[k]
	delete(m.inherited, k)
	return qs
}

// DropInherited closes the inherited queues no Adopt took (a pod whose
// lease is gone): the TAP stays, persistent, for DEL or a later start.
func (m *Manager) DropInherited() int {
	m.mu.Lock()
	left := m.inherited
	m.inherited = nil
	m.mu.Unlock()
	for _, qs := range left {
		for _, q := range qs {
			q.Close()
		}
	}
	return len(left)
}
