//go:build !race

package vxlan

const raceEnabled = false
