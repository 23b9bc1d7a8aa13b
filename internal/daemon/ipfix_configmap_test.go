package daemon

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestIPFIXConfigMapField: ipfix.configMap is Kubernetes mode's, names a
// namespace and a ConfigMap, and lets the file name no collector.
func TestIPFIXConfigMapField(t *testing.T) {
	for name, c := range map[string]struct {
		cfg Config
		ok  bool
	}{
		"kube, no collectors":  {Config{Kubeconfig: "/k", IPFIX: &IPFIXConfig{ConfigMap: "gvs/gvs-ipfix"}}, true},
		"kube, collectors too": {Config{Kubeconfig: "/k", IPFIX: &IPFIXConfig{ConfigMap: "gvs/gvs-ipfix", Collectors: []string{"192.0.2.1:4739"}}}, true},
		"not kube":             {Config{IPFIX: &IPFIXConfig{ConfigMap: "gvs/gvs-ipfix"}}, false},
		"no namespace":         {Config{Kubeconfig: "/k", IPFIX: &IPFIXConfig{ConfigMap: "gvs-ipfix"}}, false},
		"bad name":             {Config{Kubeconfig: "/k", IPFIX: &IPFIXConfig{ConfigMap: "gvs/Not_A_Name"}}, false},
		"too many collectors":  {Config{IPFIX: &IPFIXConfig{Collectors: slices.Repeat([]string{"192.0.2.1:4739"}, maxCollectors+1)}}, false},
	} {
		if _, err := c.cfg.ipfixConfig(); (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", name, err, c.ok)
		}
	}
}

// TestIPFIXFromConfigMap: the ConfigMap's configuration, the file's while
// there is none, and every malformed or unsafe one refused with a reason.
func TestIPFIXFromConfigMap(t *testing.T) {
	base := &IPFIXConfig{Collectors: []string{"192.0.2.1:4739"}, IdleTimeout: "5s", ConfigMap: "gvs/gvs-ipfix", QueueLength: 100}
	reserved := []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14"), netip.MustParsePrefix("172.30.0.0/16")}

	ic, err := ipfixFromConfigMap(base, nil, reserved)
	if err != nil || !slices.Equal(ic.Collectors, base.Collectors) || ic.IdleTimeout != 5*time.Second {
		t.Errorf("deleted: %+v, %v; want the file's", ic, err)
	}
	podBase := &IPFIXConfig{Collectors: []string{"10.128.0.9:4739"}, ConfigMap: "gvs/gvs-ipfix"}
	if _, err := ipfixFromConfigMap(podBase, nil, reserved); err == nil || !strings.Contains(err.Error(), "must not be a pod") {
		t.Errorf("deleted, the file naming a pod: %v, want refused", err)
	}
	ic, err = ipfixFromConfigMap(base, map[string]string{IPFIXConfigMapKey: `{"collectors": ["192.0.2.7:4739", "198.51.100.2:2055"], "activeTimeout": "10s"}`}, reserved)
	if err != nil || len(ic.Collectors) != 2 || ic.ActiveTimeout != 10*time.Second || ic.IdleTimeout != 0 {
		t.Errorf("two collectors: %+v, %v", ic, err)
	}
	ic, err = ipfixFromConfigMap(base, map[string]string{IPFIXConfigMapKey: `{"collectors": []}`}, reserved)
	if err != nil || len(ic.Collectors) != 0 {
		t.Errorf("no collector (export paused): %+v, %v", ic, err)
	}
	for name, c := range map[string]struct {
		data map[string]string
		why  string
	}{
		"empty":         {map[string]string{}, "no key"},
		"other key":     {map[string]string{IPFIXConfigMapKey: `{}`, "ipfix.yaml": "x"}, `key "ipfix.yaml"`},
		"not JSON":      {map[string]string{IPFIXConfigMapKey: `collectors: [192.0.2.7:4739]`}, "invalid character"},
		"unknown field": {map[string]string{IPFIXConfigMapKey: `{"colectors": ["192.0.2.7:4739"]}`}, "unknown field"},
		"two objects":   {map[string]string{IPFIXConfigMapKey: `{} {}`}, "more than one"},
		"configMap":     {map[string]string{IPFIXConfigMapKey: `{"configMap": "alpha/mine"}`}, "daemon's file only"},
		"queueLength":   {map[string]string{IPFIXConfigMapKey: `{"queueLength": 9}`}, "daemon's file only"},
		"host name":     {map[string]string{IPFIXConfigMapKey: `{"collectors": ["collector:4739"]}`}, "IPv4:port"},
		"bad timeout":   {map[string]string{IPFIXConfigMapKey: `{"collectors": ["192.0.2.7:4739"], "idleTimeout": "1ms"}`}, "idleTimeout"},
		"a pod":         {map[string]string{IPFIXConfigMapKey: `{"collectors": ["192.0.2.7:4739", "10.129.0.5:4739"]}`}, "must not be a pod"},
		"a service":     {map[string]string{IPFIXConfigMapKey: `{"collectors": ["172.30.0.10:4739"]}`}, "must not be a pod"},
		"too many":      {map[string]string{IPFIXConfigMapKey: `{"collectors": [` + strings.Repeat(`"192.0.2.7:4739",`, maxCollectors) + `"192.0.2.8:4739"]}`}, "at most"},
	} {
		_, err := ipfixFromConfigMap(base, c.data, reserved)
		if err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.why)
		}
	}
}
