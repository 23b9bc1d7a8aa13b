// Package vswitch is gvs's switch: it owns ports, runs their frames through a
// compiled flow table (package flowtable) and performs the outputs.
//
// The switch knows nothing about OpenShift: the rules it runs come from
// elsewhere (package sdn, gvsctl add-flows, or an embedding program).
package vswitch
