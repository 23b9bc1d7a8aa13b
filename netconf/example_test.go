package netconf_test

import (
	"fmt"
	"log"
	"net/netip"

	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/tap"
)

// Attach a pod: create its TAP in the pod's namespace, then name it eth0
// and give it the pod's MAC, MTU, address and routes. The TAP's file
// descriptor stays with the caller (here: dev), which hands it to a switch
// port. It needs root, so it is compiled but not run by go test.
func Example() {
	podNS, err := netconf.CreateNamedNS("pod-a")
	if err != nil {
		log.Fatal(err)
	}
	defer netconf.DeleteNamedNS("pod-a")

	var dev *tap.Device
	err = netconf.Do(podNS, func() (err error) {
		dev, err = tap.Create(tap.Config{Name: "gvs-pod-a"})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()

	ip := netip.MustParseAddr("10.128.0.3")
	gw := netip.MustParseAddr("10.128.0.1")
	err = netconf.ConfigureLink(podNS, netconf.LinkConfig{
		Name: "gvs-pod-a", NewName: "eth0",
		MAC:    netconf.PodMAC(ip),
		MTU:    1450,
		Addrs:  []netip.Prefix{netip.PrefixFrom(ip, 23)},
		Routes: []netconf.Route{{Gw: gw}}, // the default route, via the gateway
		Up:     true,
	})
	if err != nil {
		log.Fatal(err)
	}
}

func ExamplePodMAC() {
	fmt.Println(netconf.PodMAC(netip.MustParseAddr("10.128.2.7")))
	// Output: 0a:58:0a:80:02:07
}

func ExampleNsPath() {
	fmt.Println(netconf.NsPath("pod-a"))
	// Output: /run/netns/pod-a
}
