// Package vxlan implements VXLAN (RFC 7348): the 8-byte header as a []byte
// view, encapsulation and decapsulation, and the tunnel port that carries
// frames between nodes over UDP port 4789.
package vxlan
