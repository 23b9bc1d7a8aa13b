package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/lab"
)

// StartKubeProxy runs the real kube-proxy (make kube-tools) in every node's
// namespace in mode (iptables or nftables), with its defaults (no
// --masquerade-all), against the API server of kubeconfig (c.KubeAdmin in
// Kubernetes mode), NodePorts on the node's underlay address. kube-proxy
// waits for its Node object. The returned stop ends them and removes their
// rules; logs are StateDir/NODE-kube-proxy-MODE.log.
func (c *Cluster) StartKubeProxy(ctx context.Context, kubeconfig, mode string) (stop func(), err error) {
	bin := filepath.Join(kubetest.BinDir(), kubetest.KubeProxyBinary)
	var procs []*lab.Proc
	stop = func() {
		for _, p := range procs {
			p.Stop()
		}
		for _, n := range c.Nodes { // the next run starts from clean tables
			_, _ = c.Lab.Exec(context.Background(), n.NS, bin, "--cleanup", "--proxy-mode="+mode)
		}
	}
	for _, n := range c.Nodes {
		p, err := c.Lab.Start(ctx, n.NS, c.KubeProxyLog(n.Name, mode), bin,
			"--kubeconfig="+kubeconfig, "--proxy-mode="+mode, "--hostname-override="+n.Name,
			"--bind-address="+n.IP.String(), "--cluster-cidr="+c.Spec.ClusterNetwork.String(),
			"--nodeport-addresses="+netip.PrefixFrom(n.IP, 32).String(),
			"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256",
			// The lab must not change the machine's conntrack sysctls.
			"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0")
		if err != nil {
			stop()
			return nil, err
		}
		procs = append(procs, p)
	}
	return stop, nil
}

// KubeProxyLog is the log file of node's kube-proxy in mode.
func (c *Cluster) KubeProxyLog(node, mode string) string {
	return filepath.Join(c.Lab.StateDir(), node+"-kube-proxy-"+mode+".log")
}

// CreateKubeService makes a selector-less Service ns/name at ClusterIP ip
// with ports TCP 80 → 5201, UDP 53 → 9000 and SCTP 80 → 7777 (and a
// NodePort for TCP if nodePort is set), and its EndpointSlice with one
// ready endpoint at backend: what the endpoint controller would make, for
// a lab without one.
func CreateKubeService(ctx context.Context, kc kubernetes.Interface, ns, name string, ip, backend netip.Addr, nodePort int32) error {
	return CreateKubeServiceSpec(ctx, kc, KubeService{Namespace: ns, Name: name, ClusterIP: ip, Backends: []netip.Addr{backend}, NodePort: nodePort})
}

// KubeService is a selector-less Service for CreateKubeServiceSpec.
type KubeService struct {
	Namespace, Name string
	ClusterIP       netip.Addr
	Backends        []netip.Addr // ready endpoints
	NodePort        int32        // for TCP; 0: none
	// ClientIPAffinity asks for sessionAffinity ClientIP.
	ClientIPAffinity bool
	// ExternalIPs are the service's externalIPs.
	ExternalIPs []netip.Addr
}

// CreateKubeServiceSpec is CreateKubeService for any number of backends,
// with session affinity and externalIPs.
func CreateKubeServiceSpec(ctx context.Context, kc kubernetes.Interface, ks KubeService) error {
	ns, name, ip := ks.Namespace, ks.Name, ks.ClusterIP
	if !ip.IsValid() || len(ks.Backends) == 0 {
		return errors.New("cluster: a service needs a ClusterIP and a backend")
	}
	nodePort := ks.NodePort
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: ip.String(),
			Ports: []corev1.ServicePort{
				{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(5201)},
				{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(9000)},
				{Name: "sctp", Protocol: corev1.ProtocolSCTP, Port: 80, TargetPort: intstr.FromInt32(7777)},
			},
		},
	}
	if nodePort != 0 {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = nodePort
	}
	if ks.ClientIPAffinity {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	}
	for _, a := range ks.ExternalIPs {
		s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, a.String())
	}
	if _, err := kc.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("service %s/%s: %w", ns, name, err)
	}
	ready := true
	tcp, udp, sctp := corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP
	tcpName, udpName, sctpName := "tcp", "udp", "sctp"
	tcpPort, udpPort, sctpPort := int32(5201), int32(9000), int32(7777)
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-1", Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "gvs-lab"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   endpoints(ks.Backends, &ready),
		Ports: []discoveryv1.EndpointPort{
			{Name: &tcpName, Protocol: &tcp, Port: &tcpPort},
			{Name: &udpName, Protocol: &udp, Port: &udpPort},
			{Name: &sctpName, Protocol: &sctp, Port: &sctpPort},
		},
	}
	if _, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("endpoint slice of %s/%s: %w", ns, name, err)
	}
	return nil
}

func endpoints(backends []netip.Addr, ready *bool) []discoveryv1.Endpoint {
	var out []discoveryv1.Endpoint
	for _, b := range backends {
		out = append(out, discoveryv1.Endpoint{Addresses: []string{b.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ready}})
	}
	return out
}
