package vswitch

import (
	"github.com/gvswitch/gvs/tap"
	"github.com/gvswitch/gvs/vxlan"
)

// The real ports satisfy the switch's interfaces.
var (
	_ Port       = (*tap.Device)(nil)
	_ TunnelPort = (*vxlan.Port)(nil)
)

// The real ports implement the offload interfaces too.
var (
	_ OffloadPort       = (*tap.Device)(nil)
	_ OffloadTunnelPort = (*vxlan.Port)(nil)
	_ OffloadTunnelPort = (*vxlan.Queue)(nil)
)
