package vxlan

import (
	"bytes"
	"testing"
)

func FuzzDecap(f *testing.F) {
	f.Add(unhex(f, "08000000 00002a00"))
	f.Add(unhex(f, "08000000 ffffff00 ffffffffffff 020000000001 0800"))
	f.Add(unhex(f, outerARP)[42:])
	f.Add(unhex(f, "88000001 00002a00 00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		inner, vni, err := Decap(b)
		if err != nil {
			if inner != nil || vni != 0 {
				t.Fatal("error with a result")
			}
			return
		}
		if vni > MaxVNI || len(inner) != len(b)-HeaderLen {
			t.Fatalf("vni %d, inner %d of %d", vni, len(inner), len(b))
		}
		// A header Decap accepts is exactly the one Encap writes.
		c := bytes.Clone(b)
		clear(c[:HeaderLen])
		if out := Encap(c, HeaderLen, len(inner), vni); !bytes.Equal(out, b) {
			t.Fatalf("Encap(Decap(%x)) = %x", b, out)
		}
	})
}
