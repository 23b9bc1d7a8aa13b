package networkv1

import (
	"errors"
	"fmt"
	"strconv"
)

// Annotations of a HostSubnet made by an administrator for a host that is
// not a node (OpenShift's F5 BIG-IP "ramp"), as OpenShift SDN defines them.
const (
	// AssignSubnetAnnotation asks the master to give the HostSubnet a
	// subnet: the administrator creates it with host and hostIP and no
	// subnet. The master fills the subnet in and removes the annotation.
	// As in OpenShift, its presence is what counts, not its value.
	AssignSubnetAnnotation = "pod.network.openshift.io/assign-subnet"
	// FixedVNIDHostAnnotation gives the host one VNID (decimal,
	// 0..16777215): every node sends to the host's subnet with that VNI
	// instead of the source VNID, and accepts from the host only that VNI.
	// Without it the host is treated as a node.
	FixedVNIDHostAnnotation = "pod.network.openshift.io/fixed-vnid-host"
)

// maxVNID is the largest VNID (24 bits).
const maxVNID = 1<<24 - 1

// ErrInvalidFixedVNID is returned (wrapped) by FixedVNID for an annotation
// value that is not a VNID.
var ErrInvalidFixedVNID = errors.New("invalid " + FixedVNIDHostAnnotation + " value")

// FixedVNID returns the VNID of hs's fixed-vnid-host annotation and
// whether it has one. A value that is not a decimal number in 0..16777215
// is an error (wrapping ErrInvalidFixedVNID): callers refuse such a
// HostSubnet rather than treat the host as a node, which would let it
// speak as any project.
func FixedVNID(hs *HostSubnet) (vnid uint32, ok bool, err error) {
	s, ok := hs.Annotations[FixedVNIDHostAnnotation]
	if !ok {
		return 0, false, nil
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || v > maxVNID {
		return 0, true, fmt.Errorf("HostSubnet %s: %w: %q", hs.Name, ErrInvalidFixedVNID, s)
	}
	return uint32(v), true, nil
}

// WantsSubnet reports whether hs asks the master for a subnet: it has the
// assign-subnet annotation and no subnet yet.
func WantsSubnet(hs *HostSubnet) bool {
	_, ok := hs.Annotations[AssignSubnetAnnotation]
	return ok && hs.Subnet == ""
}
