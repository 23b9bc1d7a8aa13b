package console

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// KubeSource reads the cluster from a Kubernetes API server (the
// Kubernetes mode): the ClusterNetwork, HostSubnets, NetNamespaces,
// EgressNetworkPolicies, Nodes, Pods and NetworkPolicies, with gvs-master's
// own credentials (the console filters per viewer afterwards), and the
// pods' traffic from their nodes.
type KubeSource struct {
	Client  kubernetes.Interface
	Network *networkv1.Client
	// Nodes, when set, gives the pods' port counters (the nodes' trace
	// endpoints, served when they have a certificate of the gvs cluster
	// CA); without it the pods have none.
	Nodes PortReader
}

// Projects lists the NetNamespaces' names (TokenAuth.Projects).
func (s *KubeSource) Projects(ctx context.Context) ([]string, error) {
	l, err := s.Network.NetNamespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range l.Items {
		out = append(out, n.Name)
	}
	return out, nil
}

// Load implements Source.
func (s *KubeSource) Load(ctx context.Context) (View, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v := View{Read: time.Now()}
	if cn, err := s.Network.ClusterNetworks().Get(ctx, "default"); err == nil {
		v.Mode, v.ServiceNetwork = cn.PluginName, cn.ServiceNetwork
		for _, e := range cn.ClusterNetworks {
			v.ClusterNetworks = append(v.ClusterNetworks, fmt.Sprintf("%s, /%d per node", e.CIDR, 32-e.HostSubnetLength))
		}
	}
	hs, err := s.Network.HostSubnets().List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, err
	}
	nodes, err := s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, err
	}
	ready := map[string]bool{}
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready[n.Name] = true
			}
		}
	}
	for _, h := range hs.Items {
		n := Node{Name: h.Host, EgressIPs: h.EgressIPs, EgressCIDRs: h.EgressCIDRs, Tunnel: "up"}
		n.IP, _ = netip.ParseAddr(h.HostIP)
		n.Subnet, _ = netip.ParsePrefix(h.Subnet)
		if !ready[h.Host] {
			n.Tunnel = "node not Ready"
		}
		v.Nodes = append(v.Nodes, n)
	}
	slices.SortFunc(v.Nodes, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	nns, err := s.Network.NetNamespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, err
	}
	fws, err := s.Network.EgressNetworkPolicies("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, err
	}
	vnid := map[string]uint32{}
	for _, n := range nns.Items {
		p := Project{Name: n.NetName, VNID: n.NetID, Global: n.NetID == 0, EgressIPs: n.EgressIPs,
			Multicast: n.Annotations[networkv1.MulticastEnabledAnnotation] == "true"}
		for i := range fws.Items {
			if fws.Items[i].Namespace == n.NetName {
				p.Firewall = append(p.Firewall, firewallOf(&fws.Items[i])...)
			}
		}
		vnid[n.NetName] = n.NetID
		v.Projects = append(v.Projects, p)
	}
	slices.SortFunc(v.Projects, func(a, b Project) int { return cmp.Compare(a.Name, b.Name) })
	pods, err := s.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, err
	}
	for _, p := range pods.Items {
		// A pod with an address that has not ended: the pods' network
		// is what the console shows.
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if p.Spec.HostNetwork || err != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		v.Pods = append(v.Pods, Pod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, IP: ip,
			VNID: vnid[p.Namespace], Labels: p.Labels})
	}
	sortPods(v.Pods)
	nps, err := s.Client.NetworkingV1().NetworkPolicies("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, err
	}
	for i := range nps.Items {
		v.Policies = append(v.Policies, policyOf(&nps.Items[i], v.Pods))
	}
	slices.SortFunc(v.Policies, func(a, b Policy) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	if s.Nodes != nil {
		traffic(ctx, &v, s.Nodes)
	} else {
		v.Notes = append(v.Notes, "No traffic counters: gvs-master reaches no trace endpoint of the nodes.")
	}
	return v, nil
}
