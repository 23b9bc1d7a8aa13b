package master

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gvswitch/gvs/sdn/projectname"
)

// VNID limits (docs/control-plane.md "Allocation").
const (
	GlobalVNID     uint32 = 0  // reaches and is reached by every project
	MinVNID        uint32 = 10 // first allocatable VNID; 1–9 are reserved
	MaxVNID        uint32 = 1<<24 - 1
	DefaultProject        = "default"
)

// Sentinel errors of project operations.
var (
	ErrNoSuchProject   = errors.New("no such project")
	ErrProjectExists   = errors.New("project already exists")
	ErrIsolateDefault  = errors.New("project default cannot be isolated")
	ErrVNIDsExhausted  = errors.New("no free VNID")
	ErrInvalidProjName = errors.New("invalid project name")
)

// VNIDs is the multitenant project → VNID map with its allocator. VNID 0
// is global; a VNID other than 0 is released when no project uses it. It
// is not safe for concurrent use.
type VNIDs struct {
	projects map[string]uint32
	users    map[uint32]int // VNID → projects using it (0 excluded)
	global   map[string]bool
	next     uint32
}

// NewVNIDs returns an empty map; the projects named in global (and
// "default") get VNID 0 when created.
func NewVNIDs(global []string) *VNIDs {
	v := &VNIDs{projects: map[string]uint32{}, users: map[uint32]int{}, global: map[string]bool{DefaultProject: true}, next: MinVNID}
	for _, g := range global {
		v.global[g] = true
	}
	return v
}

// Load records an existing assignment (rebuilding from the registry).
func (v *VNIDs) Load(project string, vnid uint32) {
	if old, ok := v.projects[project]; ok {
		v.unuse(old)
	}
	v.projects[project] = vnid
	if vnid != GlobalVNID {
		v.users[vnid]++
	}
}

// Projects returns a copy of the project → VNID map.
func (v *VNIDs) Projects() map[string]uint32 { return maps.Clone(v.projects) }

// Get returns a project's VNID.
func (v *VNIDs) Get(project string) (uint32, bool) {
	n, ok := v.projects[project]
	return n, ok
}

// Cursor returns where the next VNID scan starts.
func (v *VNIDs) Cursor() uint32 { return v.next }

// SetCursor restores a saved cursor (ignored when out of range).
func (v *VNIDs) SetCursor(c uint32) {
	if c >= MinVNID && c <= MaxVNID {
		v.next = c
	}
}

// InUse reports whether a VNID is used by some project (0 always is).
func (v *VNIDs) InUse(n uint32) bool { return n == GlobalVNID || v.users[n] > 0 }

func (v *VNIDs) unuse(n uint32) {
	if n == GlobalVNID {
		return
	}
	if v.users[n]--; v.users[n] <= 0 {
		delete(v.users, n)
	}
}

func (v *VNIDs) alloc() (uint32, error) {
	span := MaxVNID - MinVNID + 1
	for k := uint32(0); k < span; k++ {
		n := MinVNID + (v.next-MinVNID+k)%span
		if v.users[n] == 0 {
			v.next = n + 1
			if v.next > MaxVNID {
				v.next = MinVNID
			}
			return n, nil
		}
	}
	return 0, ErrVNIDsExhausted
}

// Create adds a project: VNID 0 for default and the global projects, a
// fresh VNID otherwise.
func (v *VNIDs) Create(project string) (uint32, error) {
	if !projectname.Valid(project) {
		return 0, fmt.Errorf("%w: %q", ErrInvalidProjName, project)
	}
	if _, ok := v.projects[project]; ok {
		return 0, fmt.Errorf("%w: %s", ErrProjectExists, project)
	}
	n := GlobalVNID
	if !v.global[project] {
		var err error
		if n, err = v.alloc(); err != nil {
			return 0, err
		}
	}
	v.Load(project, n)
	return n, nil
}

// Delete removes a project, releasing its VNID when no project uses it.
func (v *VNIDs) Delete(project string) error {
	n, ok := v.projects[project]
	if !ok {
		return fmt.Errorf("%w: %s", ErrNoSuchProject, project)
	}
	delete(v.projects, project)
	v.unuse(n)
	return nil
}

func (v *VNIDs) check(projects []string) error {
	for _, p := range projects {
		if _, ok := v.projects[p]; !ok {
			return fmt.Errorf("%w: %s", ErrNoSuchProject, p)
		}
	}
	return nil
}

// Join gives each of projects the VNID of target, so they reach each other.
func (v *VNIDs) Join(target string, projects ...string) error {
	if err := v.check(append([]string{target}, projects...)); err != nil {
		return err
	}
	t := v.projects[target]
	for _, p := range projects {
		v.Load(p, t)
	}
	return nil
}

// MakeGlobal gives each project VNID 0.
func (v *VNIDs) MakeGlobal(projects ...string) error {
	if err := v.check(projects); err != nil {
		return err
	}
	for _, p := range projects {
		v.Load(p, GlobalVNID)
	}
	return nil
}

// Isolate gives each project a fresh VNID of its own; refused for default.
func (v *VNIDs) Isolate(projects ...string) error {
	if err := v.check(projects); err != nil {
		return err
	}
	if slices.Contains(projects, DefaultProject) {
		return ErrIsolateDefault
	}
	for _, p := range projects {
		old := v.projects[p]
		if old != GlobalVNID && v.users[old] == 1 {
			continue // already alone on its VNID
		}
		v.unuse(old)
		n, err := v.alloc()
		if err != nil {
			if old != GlobalVNID {
				v.users[old]++
			}
			return err
		}
		v.projects[p] = n
		v.users[n]++
	}
	return nil
}

// ErrInvalidNodeName is returned for a node name that is not a DNS
// subdomain (ValidNodeName).
var ErrInvalidNodeName = errors.New("invalid node name")

// ValidNodeName reports whether s can name a node: a DNS subdomain of
// lower-case labels (as Kubernetes node names are), at most 253 bytes. Node
// names are parts of registry keys and etcd permissions, so a slash or any
// other character outside that set is refused.
func ValidNodeName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if !projectname.Valid(label) {
			return false
		}
	}
	return true
}
