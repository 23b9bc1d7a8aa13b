package cniplugin

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
)

// PluginType is the network type this plugin answers to.
const PluginType = "gvs"

// SupportedVersions are the CNI spec versions gvs-cni speaks.
var supportedVersions = []string{"0.4.0", "1.0.0", "1.1.0"}

// SupportedVersions returns the CNI spec versions gvs-cni speaks.
func SupportedVersions() []string { return slices.Clone(supportedVersions) }

// NetConf is gvs's network configuration: the standard keys plus "socket".
type NetConf struct {
	types.NetConf
	// Socket is gvs-switchd's CNI socket (default DefaultSocket).
	Socket string `json:"socket,omitempty"`
	// RuntimeConfig holds the capability arguments gvs takes from the
	// runtime: bandwidth.
	RuntimeConfig struct {
		Bandwidth *Bandwidth `json:"bandwidth,omitempty"`
	} `json:"runtimeConfig,omitempty"`
}

// ParseNetConf decodes and validates a network configuration. Its errors
// are *types.Error with code types.ErrDecodingFailure (6) for JSON that
// does not decode, types.ErrIncompatibleCNIVersion (1) for a version gvs
// does not speak and types.ErrInvalidNetworkConfig (7) otherwise.
func ParseNetConf(b []byte) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "failed to decode the network configuration", err.Error())
	}
	if c.CNIVersion == "" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "invalid network configuration", "cniVersion is missing")
	}
	if !slices.Contains(supportedVersions, c.CNIVersion) {
		return nil, types.NewError(types.ErrIncompatibleCNIVersion, "incompatible CNI version",
			fmt.Sprintf("cniVersion %q is not supported; gvs speaks %v", c.CNIVersion, supportedVersions))
	}
	if c.Type != PluginType {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "invalid network configuration",
			fmt.Sprintf("type is %q, want %q", c.Type, PluginType))
	}
	if c.Name == "" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "invalid network configuration", "name is missing")
	}
	if c.IPAM.Type != "" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "invalid network configuration",
			fmt.Sprintf("ipam %q is not supported: gvs-switchd allocates addresses from the node subnet; remove the ipam key", c.IPAM.Type))
	}
	if c.Socket == "" {
		c.Socket = DefaultSocket
	} else if !filepath.IsAbs(c.Socket) {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "invalid network configuration",
			fmt.Sprintf("socket %q must be an absolute path", c.Socket))
	}
	return &c, nil
}
