// Package networkv1 holds OpenShift SDN's network.openshift.io/v1 objects
// (ClusterNetwork, HostSubnet, NetNamespace, EgressNetworkPolicy) with
// OpenShift's own JSON field names, the change-network annotation that
// `oc adm pod-network` writes, and a small typed client for them.
//
// The types are written by hand rather than imported from openshift/api or
// read through the dynamic client: four flat objects do not justify
// OpenShift's client-go fork and generated code in the product's module,
// and typed fields catch a misspelt JSON name at compile time where
// unstructured maps would not. The CRDs that serve them are in deploy/crds.
package networkv1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GroupName and Version name the API group of these objects.
const (
	GroupName = "network.openshift.io"
	Version   = "v1"
)

// Resource names (the plural, lower-case form the REST paths use).
const (
	ResourceClusterNetworks       = "clusternetworks"
	ResourceHostSubnets           = "hostsubnets"
	ResourceNetNamespaces         = "netnamespaces"
	ResourceEgressNetworkPolicies = "egressnetworkpolicies"
)

// ClusterNetworkDefault is the name of the one ClusterNetwork object that
// describes the cluster.
const ClusterNetworkDefault = "default"

// Annotations OpenShift SDN defines on these objects.
const (
	// ChangePodNetworkAnnotation on a NetNamespace asks the master to change
	// its netid: "join:<project>", "global" or "isolate". The master applies
	// it and removes it; `oc adm pod-network` waits for the removal.
	ChangePodNetworkAnnotation = "pod.network.openshift.io/multitenant.change-network"
	// MulticastEnabledAnnotation "true" on a NetNamespace opts its project
	// in to multicast (OpenShift SDN's; `oc annotate netnamespace`).
	MulticastEnabledAnnotation = "netnamespace.network.openshift.io/multicast-enabled"
	// NodeUIDAnnotation on a HostSubnet records the UID of the Node it was
	// allocated for, so a stale HostSubnet (its Node deleted, or replaced
	// by another of the same name) is recognised. A HostSubnet without it
	// was made by hand and is left alone.
	NodeUIDAnnotation = "pod.network.openshift.io/node-uid"
)

// ClusterNetwork describes the cluster network; there is normally one,
// named "default", published by the master from its configuration.
// Its fields are top-level, not under spec/status, as in OpenShift.
type ClusterNetwork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Network is the first cluster network's CIDR (kept for older clients).
	Network string `json:"network,omitempty"`
	// HostSubnetLength is the first cluster network's host bits.
	HostSubnetLength uint32 `json:"hostsubnetlength,omitempty"`
	// ServiceNetwork is the CIDR services are allocated from.
	ServiceNetwork string `json:"serviceNetwork"`
	// PluginName is the plugin in use, e.g. "redhat/openshift-ovs-multitenant".
	PluginName string `json:"pluginName,omitempty"`
	// ClusterNetworks are the cluster networks node subnets are taken
	// from, in order.
	ClusterNetworks []ClusterNetworkEntry `json:"clusterNetworks"`
	// VXLANPort is the VXLAN UDP port; nil means 4789.
	VXLANPort *uint32 `json:"vxlanPort,omitempty"`
	// MTU is the overlay MTU; nil means the plugin's default.
	MTU *uint32 `json:"mtu,omitempty"`
}

// ClusterNetworkEntry is one cluster network. Its JSON names are "CIDR"
// (upper case) and "hostSubnetLength", as in OpenShift.
type ClusterNetworkEntry struct {
	CIDR             string `json:"CIDR"`
	HostSubnetLength uint32 `json:"hostSubnetLength"`
}

// ClusterNetworkList is a list of ClusterNetworks.
type ClusterNetworkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterNetwork `json:"items"`
}

// HostSubnet is a node's pod subnet. Its name is the node's name.
type HostSubnet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Host is the node's name (the same as the object's name).
	Host string `json:"host"`
	// HostIP is the node's address, the VTEP other nodes send VXLAN to.
	HostIP string `json:"hostIP"`
	// Subnet is the node's pod subnet (CIDR).
	Subnet string `json:"subnet"`
	// EgressIPs are the egress IPs this node hosts (not used by gvs yet).
	EgressIPs []string `json:"egressIPs,omitempty"`
	// EgressCIDRs are the ranges egress IPs may be assigned to this node
	// from (not used by gvs yet).
	EgressCIDRs []string `json:"egressCIDRs,omitempty"`
}

// HostSubnetList is a list of HostSubnets.
type HostSubnetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HostSubnet `json:"items"`
}

// NetNamespace is a project's network: its name is the Namespace's name,
// NetID its VNID (0 is global).
type NetNamespace struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// NetName is the namespace's name (the same as the object's name).
	NetName string `json:"netname"`
	// NetID is the VNID, 0..2^24-1.
	NetID uint32 `json:"netid"`
	// EgressIPs are the project's egress IPs (not used by gvs yet).
	EgressIPs []string `json:"egressIPs,omitempty"`
}

// NetNamespaceList is a list of NetNamespaces.
type NetNamespaceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NetNamespace `json:"items"`
}

// EgressNetworkPolicyRuleType is "Allow" or "Deny".
type EgressNetworkPolicyRuleType string

// The egress rule types.
const (
	EgressNetworkPolicyRuleAllow EgressNetworkPolicyRuleType = "Allow"
	EgressNetworkPolicyRuleDeny  EgressNetworkPolicyRuleType = "Deny"
)

// EgressNetworkPolicyPeer is where a rule applies: a CIDR or a DNS name,
// exactly one of them.
type EgressNetworkPolicyPeer struct {
	CIDRSelector string `json:"cidrSelector,omitempty"`
	DNSName      string `json:"dnsName,omitempty"`
}

// EgressNetworkPolicyRule allows or denies traffic to a peer.
type EgressNetworkPolicyRule struct {
	Type EgressNetworkPolicyRuleType `json:"type"`
	To   EgressNetworkPolicyPeer     `json:"to"`
}

// EgressNetworkPolicySpec is the ordered list of rules; the first match
// wins and traffic no rule matches is allowed.
type EgressNetworkPolicySpec struct {
	Egress []EgressNetworkPolicyRule `json:"egress"`
}

// EgressNetworkPolicy is a project's egress firewall (namespaced; unlike
// the other three its rules are under spec). gvs-switchd enforces it in
// table 100 (docs/openshift-rules.md, "Egress firewall").
type EgressNetworkPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              EgressNetworkPolicySpec `json:"spec"`
}

// EgressNetworkPolicyList is a list of EgressNetworkPolicies.
type EgressNetworkPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EgressNetworkPolicy `json:"items"`
}
