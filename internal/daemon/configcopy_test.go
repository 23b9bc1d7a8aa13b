package daemon

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn"
)

// fillAll sets every field v reaches to a value that is not zero: each
// string, number and bool, one element in each slice and map, a value
// behind each pointer.
func fillAll(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Struct:
		for i := range v.NumField() {
			fillAll(t, v.Field(i))
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillAll(t, v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillAll(t, v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillAll(t, k)
		fillAll(t, e)
		v.SetMapIndex(k, e)
	default:
		t.Fatalf("Config holds a %v: teach fillAll and Config.clone about it", v.Type())
	}
}

// shared names the first slice, map or pointer a and b share, if any.
func shared(a, b reflect.Value, path string) string {
	switch a.Kind() {
	case reflect.Struct:
		for i := range a.NumField() {
			if s := shared(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); s != "" {
				return s
			}
		}
	case reflect.Pointer, reflect.Slice, reflect.Map:
		if !a.IsNil() && a.Pointer() == b.Pointer() {
			return path
		}
		if a.Kind() == reflect.Pointer && !a.IsNil() {
			return shared(a.Elem(), b.Elem(), path)
		}
		if a.Kind() == reflect.Slice {
			for i := range a.Len() {
				if s := shared(a.Index(i), b.Index(i), path+"[i]"); s != "" {
					return s
				}
			}
		}
	}
	return ""
}

// The daemon's copy of its configuration shares nothing with the
// caller's, whatever field a later change adds: writing one cannot write
// the other.
func TestConfigCloneSharesNothing(t *testing.T) {
	var c Config
	fillAll(t, reflect.ValueOf(&c).Elem())
	n := c.clone()
	if !reflect.DeepEqual(&c, n) {
		t.Fatalf("clone differs from the original:\n%+v\n%+v", c, *n)
	}
	if s := shared(reflect.ValueOf(c), reflect.ValueOf(*n), "Config"); s != "" {
		t.Errorf("clone shares %s with the original", s)
	}
}

// filledFrom is pure: it fills the gaps of a copy and leaves the
// configuration it is called on as it was.
func TestFilledFromLeavesConfig(t *testing.T) {
	c := &Config{NodeName: "n1", NodeIP: "192.0.2.1", EtcdEndpoints: []string{"unix:///x"}, EtcdInsecure: true}
	before := c.clone()
	cl := source.Cluster{ClusterNetworks: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14")},
		ServiceNetwork: netip.MustParsePrefix("172.30.0.0/16"), Mode: sdn.ModeMultitenant, VXLANPort: 4790}
	sub := netip.MustParsePrefix("10.128.2.0/23")
	f := c.filledFrom(cl, sub)
	if !reflect.DeepEqual(c, before) {
		t.Errorf("filledFrom wrote its receiver:\n got %+v\nwant %+v", *c, *before)
	}
	want := before.clone()
	want.ClusterNetworks, want.ServiceNetwork, want.Mode, want.VXLANPort, want.Subnet =
		[]string{"10.128.0.0/14"}, "172.30.0.0/16", string(sdn.ModeMultitenant), 4790, "10.128.2.0/23"
	if !reflect.DeepEqual(f, want) {
		t.Errorf("filledFrom:\n got %+v\nwant %+v", *f, *want)
	}
	// What the configuration gives is kept.
	c.Mode, c.VXLANPort = string(sdn.ModeSubnet), 4789
	if f := c.filledFrom(cl, sub); f.Mode != string(sdn.ModeSubnet) || f.VXLANPort != 4789 {
		t.Errorf("filledFrom replaced configured values: mode %q, vxlanPort %d", f.Mode, f.VXLANPort)
	}
}
