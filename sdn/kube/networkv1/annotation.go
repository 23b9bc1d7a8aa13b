package networkv1

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gvswitch/gvs/sdn/projectname"
)

// PodNetworkAction is what a change-network annotation asks for.
type PodNetworkAction string

// The actions `oc adm pod-network` writes: make-projects-global writes
// "global", isolate-projects "isolate", join-projects --to=P "join:P".
const (
	ActionGlobal  PodNetworkAction = "global"
	ActionJoin    PodNetworkAction = "join"
	ActionIsolate PodNetworkAction = "isolate"
)

// ErrInvalidChangeNetwork is returned (wrapped) by ParseChangeNetwork for
// a value that is not one of the three forms.
var ErrInvalidChangeNetwork = errors.New("invalid " + ChangePodNetworkAnnotation + " value")

// ChangeNetwork is a parsed change-network annotation.
type ChangeNetwork struct {
	Action PodNetworkAction
	// Project is the project to join (ActionJoin only).
	Project string
}

// String formats c as the annotation's value.
func (c ChangeNetwork) String() string {
	if c.Action == ActionJoin {
		return string(ActionJoin) + ":" + c.Project
	}
	return string(c.Action)
}

// ParseChangeNetwork parses the value of ChangePodNetworkAnnotation:
// "global", "isolate" or "join:<project>" with a DNS-label project name.
// It is stricter than OpenShift's parser, which ignores anything after
// "global:" or "isolate:"; `oc adm pod-network` never writes such values.
func ParseChangeNetwork(value string) (ChangeNetwork, error) {
	action, arg, hasArg := strings.Cut(value, ":")
	switch PodNetworkAction(action) {
	case ActionGlobal, ActionIsolate:
		if !hasArg {
			return ChangeNetwork{Action: PodNetworkAction(action)}, nil
		}
	case ActionJoin:
		if hasArg && projectname.Valid(arg) {
			return ChangeNetwork{Action: ActionJoin, Project: arg}, nil
		}
	}
	return ChangeNetwork{}, fmt.Errorf("%w: %q (want global, isolate or join:<project>)", ErrInvalidChangeNetwork, value)
}
