package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gvswitch/gvs/sdn"
)

// ServicesPrefix holds the Services of the etcd-registry mode:
// ServicesPrefix+namespace+"/"+name → Service, written by an administrator
// (gvsctl services set), read by every node for the multitenant table 60.
// In the Kubernetes mode the API server's Services take their place.
const ServicesPrefix = Prefix + "services/"

// Service is a Service's record: its ClusterIP and ports.
type Service struct {
	ClusterIP netip.Addr    `json:"clusterIP"`
	Ports     []ServicePort `json:"ports"`
}

// ServicePort is one port of a Service, its protocol as Kubernetes names
// it (TCP, UDP, SCTP).
type ServicePort struct {
	Protocol string `json:"protocol"`
	Port     uint16 `json:"port"`
}

// ServiceKey returns the key of service name in namespace.
func ServiceKey(namespace, name string) string { return ServicesPrefix + namespace + "/" + name }

// ParseServiceKey splits a ServicesPrefix key into namespace and name.
func ParseServiceKey(key string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(key, ServicesPrefix)
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, "/")
	return namespace, name, ok && namespace != "" && name != "" && !strings.Contains(name, "/")
}

// ParseProtocol returns the IP protocol number of a Kubernetes protocol
// name (TCP, UDP, SCTP; any case).
func ParseProtocol(s string) (uint8, error) {
	switch strings.ToUpper(s) {
	case "TCP":
		return sdn.ProtoTCP, nil
	case "UDP":
		return sdn.ProtoUDP, nil
	case "SCTP":
		return sdn.ProtoSCTP, nil
	}
	return 0, fmt.Errorf("protocol %q: want TCP, UDP or SCTP", s)
}

// SDN returns the record as the rule program takes it (its VNID is the
// node's to fill in).
func (s Service) SDN(namespace, name string) (sdn.Service, error) {
	out := sdn.Service{Namespace: namespace, Name: name, ClusterIP: s.ClusterIP}
	for _, p := range s.Ports {
		proto, err := ParseProtocol(p.Protocol)
		if err != nil {
			return out, fmt.Errorf("service %s/%s: %w", namespace, name, err)
		}
		out.Ports = append(out.Ports, sdn.ServicePort{Protocol: proto, Port: p.Port})
	}
	return out, nil
}

// validNamePart reports whether s can be a namespace or service name (a
// DNS label, as Kubernetes requires).
func validNamePart(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// SetService writes a service's record.
func (r *Registry) SetService(ctx context.Context, namespace, name string, s Service) error {
	if !validNamePart(namespace) || !validNamePart(name) {
		return fmt.Errorf("service %s/%s: namespace and name must be DNS labels", namespace, name)
	}
	if !s.ClusterIP.Is4() {
		return fmt.Errorf("service %s/%s: ClusterIP %v is not IPv4", namespace, name, s.ClusterIP)
	}
	if _, err := s.SDN(namespace, name); err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = r.c.Put(ctx, ServiceKey(namespace, name), string(b))
	return err
}

// DeleteService deletes a service's record; an unknown one is not an
// error.
func (r *Registry) DeleteService(ctx context.Context, namespace, name string) error {
	_, err := r.c.Delete(ctx, ServiceKey(namespace, name))
	return err
}

// Services returns every service's record, by "namespace/name".
func (r *Registry) Services(ctx context.Context) (map[string]Service, error) {
	resp, err := r.c.Get(ctx, ServicesPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := map[string]Service{}
	for _, kv := range resp.Kvs {
		ns, name, ok := ParseServiceKey(string(kv.Key))
		if !ok {
			continue
		}
		var s Service
		if err := json.Unmarshal(kv.Value, &s); err != nil {
			return nil, fmt.Errorf("service %s/%s: %w", ns, name, err)
		}
		out[ns+"/"+name] = s
	}
	return out, nil
}
