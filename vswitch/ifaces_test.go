package vswitch

import (
	"github.com/gvswitch/gvs/tap"
	"github.com/gvswitch/gvs/vxlan"
)

// The real ports satisfy the switch's Port interface, and the tunnel's
// Framer.
var (
	_ Port   = (*tap.Device)(nil)
	_ Port   = (*vxlan.Port)(nil)
	_ Port   = (*vxlan.Queue)(nil)
	_ Framer = (*vxlan.Port)(nil)
	_ Framer = (*vxlan.Queue)(nil)
)
