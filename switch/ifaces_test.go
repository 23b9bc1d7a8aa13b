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
