package node

import (
	"errors"
	"fmt"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
)

// Services: in multitenant mode table 60 lets a pod reach only the
// services of its own project (and a global project's pods every
// service), as OpenShift SDN does. The Program keeps the services it was
// told about and gives each the VNID its project has now: a service of a
// project with no VNID yet has no rules (its packets are dropped), and a
// project's VNID change re-tags its services with its pods.

func serviceKey(namespace, name string) string { return namespace + "/" + name }

// SetService installs (or replaces) a service's table 60 rules with its
// project's VNID (svc.VNID is ignored). In the modes without tenant
// isolation services have no rules of their own and SetService only
// records it.
func (p *Program) SetService(svc sdn.Service) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.node.CheckService(svc); err != nil {
		return err
	}
	key := serviceKey(svc.Namespace, svc.Name)
	var dels []flowtable.Filter
	if old, ok := p.services[key]; ok {
		dels = append(dels, cookieFilter(sdn.ServiceCookie(old.ClusterIP)))
	}
	rules, err := p.serviceRules(&svc)
	if err != nil {
		return fmt.Errorf("service %s: %w", key, err)
	}
	if err := p.table.Apply(dels, rules); err != nil {
		return fmt.Errorf("service %s: %w", key, err)
	}
	p.services[key] = svc
	return nil
}

// serviceRules sets svc.VNID to its project's and returns its rules; none
// while the project has no VNID.
func (p *Program) serviceRules(svc *sdn.Service) ([]*flowtable.Rule, error) {
	v, ok := p.projectVNID(svc.Namespace)
	if !ok {
		svc.VNID = noVNID
		return nil, nil
	}
	svc.VNID = v
	return sdn.ServiceRules(p.node, *svc)
}

// noVNID marks a recorded service whose project has no VNID yet.
const noVNID = ^uint32(0)

// DeleteService removes a service's rules; an unknown one is not an error.
func (p *Program) DeleteService(namespace, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := serviceKey(namespace, name)
	old, ok := p.services[key]
	if !ok {
		return nil
	}
	if err := p.table.Apply([]flowtable.Filter{cookieFilter(sdn.ServiceCookie(old.ClusterIP))}, nil); err != nil {
		return fmt.Errorf("service %s: %w", key, err)
	}
	delete(p.services, key)
	return nil
}

// Services lists the recorded services with the VNIDs their rules carry
// (noVNID: none yet).
func (p *Program) Services() []sdn.Service {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]sdn.Service, 0, len(p.services))
	for _, s := range p.services {
		out = append(out, s)
	}
	return out
}

// retagServices returns the table updates that give project's services
// its VNID now, and records them; the caller applies the updates under
// p.mu and calls it before changing anything else.
func (p *Program) retagServices(project string) (dels []flowtable.Filter, adds []*flowtable.Rule, commit func(), err error) {
	var errs []error
	changed := map[string]sdn.Service{}
	for key, svc := range p.services {
		if svc.Namespace != project {
			continue
		}
		dels = append(dels, cookieFilter(sdn.ServiceCookie(svc.ClusterIP)))
		rs, err := p.serviceRules(&svc)
		adds = append(adds, rs...)
		errs = append(errs, err)
		changed[key] = svc
	}
	return dels, adds, func() {
		for k, s := range changed {
			p.services[k] = s
		}
	}, errors.Join(errs...)
}
