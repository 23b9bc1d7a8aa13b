package packet

// PodMAC returns the MAC address OpenShift SDN gives a pod: the locally
// administered prefix 0a:58 followed by the pod's IPv4 address, so that the
// address can be derived from the IP without ARP state.
func PodMAC(ip [4]byte) [6]byte {
	return [6]byte{0x0a, 0x58, ip[0], ip[1], ip[2], ip[3]}
}
