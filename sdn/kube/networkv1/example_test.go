package networkv1_test

import (
	"fmt"

	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// The values oc adm pod-network writes on a NetNamespace.
func ExampleParseChangeNetwork() {
	for _, v := range []string{"join:alpha", "global", "isolate", "global:alpha"} {
		c, err := networkv1.ParseChangeNetwork(v)
		if err != nil {
			fmt.Println("refused:", v)
			continue
		}
		fmt.Printf("%s %q\n", c.Action, c.Project)
	}
	// Output:
	// join "alpha"
	// global ""
	// isolate ""
	// refused: global:alpha
}
