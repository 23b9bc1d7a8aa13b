package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gvswitch/gvs/internal/flagargs"
	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
)

// renewBefore: gvs-master re-issues its own certificates at start when they
// expire within this.
const renewBefore = 30 * 24 * time.Hour

// Identity file names in the PKI directory.
const (
	serverName = "etcd-server"
	peerName   = "etcd-peer"
	endpointsF = "etcd-endpoints" // the endpoints gvs-master uses, for gvs-master cert
)

type masterFiles struct{ server, peer, master pki.Files }

// hostsOf returns the host of a URL as a SAN: an address or a DNS name.
func hostsOf(raw string) (ips []netip.Addr, dns []string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, err
	}
	h := u.Hostname()
	if ip, err := netip.ParseAddr(h); err == nil {
		if !ip.IsUnspecified() {
			ips = append(ips, ip)
		}
	} else if h != "" {
		dns = append(dns, h)
	}
	return ips, dns, nil
}

// sanRequest is a server certificate request for the given URLs' hosts,
// localhost and 127.0.0.1, and the extra SANs.
func sanRequest(cn string, urls []string, extra []string) (pki.Request, error) {
	req := pki.Request{CommonName: cn, Usage: pki.ServerAuth | pki.ClientAuth,
		DNSNames: []string{"localhost"}, IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
	for _, u := range urls {
		ips, dns, err := hostsOf(u)
		if err != nil {
			return req, fmt.Errorf("%s: %w", u, err)
		}
		req.IPs = append(req.IPs, ips...)
		req.DNSNames = append(req.DNSNames, dns...)
	}
	for _, s := range extra {
		if ip, err := netip.ParseAddr(s); err == nil {
			req.IPs = append(req.IPs, ip)
		} else {
			req.DNSNames = append(req.DNSNames, s)
		}
	}
	return req, nil
}

// ensureMasterPKI makes (or loads) the cluster CA and the certificates the
// embedded etcd and gvs-master need, re-issuing any that is missing, about
// to expire or without a name it needs. With an operator's CA that cannot
// sign (no ca.key), the files must be there already.
func ensureMasterPKI(fc fileConfig, log *slog.Logger) (masterFiles, error) {
	d := pki.Dir(fc.PKIDir)
	ca, created, err := d.EnsureCA("gvs cluster CA")
	if err != nil {
		return masterFiles{}, err
	}
	if created {
		log.Info("created the cluster CA", "dir", fc.PKIDir)
	}
	srvReq, err := sanRequest(serverName, []string{fc.ClientURL}, fc.CertSANs)
	if err != nil {
		return masterFiles{}, err
	}
	peerReq, err := sanRequest(peerName, []string{fc.PeerURL}, nil)
	if err != nil {
		return masterFiles{}, err
	}
	var f masterFiles
	for _, x := range []struct {
		dst  *pki.Files
		name string
		req  pki.Request
	}{
		{&f.server, serverName, srvReq},
		{&f.peer, peerName, peerReq},
		{&f.master, pki.MasterUser, pki.Request{CommonName: pki.MasterUser, Usage: pki.ClientAuth}},
		{nil, pki.AdminUser, pki.Request{CommonName: pki.AdminUser, Usage: pki.ClientAuth, Organization: []string{pki.AdminOrganization}}},
	} {
		files, issued, err := ensure(d, ca, x.name, x.req)
		if err != nil {
			return masterFiles{}, err
		}
		if issued {
			log.Info("issued a certificate", "name", x.name, "cert", files.Cert)
		}
		if x.dst != nil {
			*x.dst = files
		}
	}
	return f, nil
}

// ensure is pki.Dir.Ensure, or with a CA that cannot sign, a check that the
// operator put the files there.
func ensure(d pki.Dir, ca *pki.CA, name string, req pki.Request) (pki.Files, bool, error) {
	if !ca.CanSign() {
		f := d.Files(name)
		if err := f.Validate(); err != nil {
			return f, false, fmt.Errorf("%w: %s needs %s and %s issued by your CA for %s: %w",
				pki.ErrNoCAKey, d, f.Cert, f.Key, req.CommonName, err)
		}
		return f, false, nil
	}
	return d.Ensure(ca, name, req, renewBefore)
}

// ensureClientPKI is gvs-master's client identity for an external etcd
// (and the administrator's, as with the embedded one).
func ensureClientPKI(fc fileConfig) (pki.Files, error) {
	d := pki.Dir(fc.PKIDir)
	ca, _, err := d.EnsureCA("gvs cluster CA")
	if err != nil {
		return pki.Files{}, err
	}
	if _, _, err := ensure(d, ca, pki.AdminUser, pki.Request{CommonName: pki.AdminUser, Usage: pki.ClientAuth, Organization: []string{pki.AdminOrganization}}); err != nil {
		return pki.Files{}, err
	}
	f, _, err := ensure(d, ca, pki.MasterUser, pki.Request{CommonName: pki.MasterUser, Usage: pki.ClientAuth})
	return f, err
}

// legacyData reports whether dir holds an embedded etcd's data directly
// (gvs-master before pki/ kept it in DATA-DIR/etcd).
func legacyData(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, "member"))
	return err == nil && st.IsDir()
}

// writeEndpoints records the endpoints gvs-master uses, so that gvs-master
// cert finds etcd to authorize a node.
func writeEndpoints(dir string, eps []string, insecure bool) error {
	if insecure {
		return nil
	}
	return pki.WriteFile(filepath.Join(dir, endpointsF), []byte(strings.Join(eps, ",")+"\n"), 0o644)
}

func readEndpoints(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, endpointsF))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(b)), ",")
}

const certUsage = `usage:
  gvs-master cert node NAME  [-out DIR] [-days N] [-no-authorize]
                             a node's certificate (identity node:NAME) and its etcd user
  gvs-master cert admin NAME [-out DIR] [-days N] [-no-authorize]
                             an administrator's certificate (gvsctl projects, nodes)
  gvs-master cert etcd-server NAME -san HOST[,HOST...] [-out DIR]
                             a server and peer certificate for an external etcd member
  gvs-master authorize-node NAME   the etcd user of a node whose certificate your own CA issued
  gvs-master revoke-node NAME      delete a node's etcd user (its certificate no longer opens etcd) and end its lease

common flags: -data-dir DIR (default /var/lib/gvs-master) or -pki-dir DIR;
-etcd-endpoints URL,... (default: the endpoints the running gvs-master recorded).
-out DIR receives ca.crt, tls.crt and tls.key (the key 0600); default ./NAME.
`

// certFlags are the flags every certificate command takes.
type certFlags struct {
	fs        *flag.FlagSet
	dataDir   *string
	pkiDir    *string
	endpoints *string
}

func newCertFlags(name string, out io.Writer) *certFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { fmt.Fprint(out, certUsage) }
	return &certFlags{fs: fs,
		dataDir:   fs.String("data-dir", "/var/lib/gvs-master", "gvs-master's data directory"),
		pkiDir:    fs.String("pki-dir", "", "CA and certificates (default DATA-DIR/pki)"),
		endpoints: fs.String("etcd-endpoints", "", "etcd endpoints to authorize in (default: what gvs-master recorded)"),
	}
}

func (c *certFlags) dir() pki.Dir {
	if *c.pkiDir != "" {
		return pki.Dir(*c.pkiDir)
	}
	return pki.Dir(filepath.Join(*c.dataDir, "pki"))
}

// registry dials etcd as gvs-master (the identity that may create users).
func (c *certFlags) registry() (*registry.Registry, func(), error) {
	eps := readEndpoints(string(c.dir()))
	if *c.endpoints != "" {
		eps = strings.Split(*c.endpoints, ",")
	}
	if len(eps) == 0 {
		return nil, nil, fmt.Errorf("no etcd endpoints: start gvs-master first, or give -etcd-endpoints")
	}
	cli, err := registry.Dial(registry.DialConfig{Endpoints: eps, TLS: c.dir().Files(pki.MasterUser)})
	if err != nil {
		return nil, nil, err
	}
	return registry.New(cli), func() { cli.Close() }, nil
}

func certCmd(args []string, out io.Writer) error {
	cf := newCertFlags("gvs-master cert", out)
	outDir := cf.fs.String("out", "", "directory for ca.crt, tls.crt, tls.key (default ./NAME)")
	days := cf.fs.Int("days", 365, "validity in days")
	noAuth := cf.fs.Bool("no-authorize", false, "do not create the etcd user (do it later with authorize-node)")
	var sans listFlag
	cf.fs.Var(&sans, "san", "etcd-server: names and addresses of the member, repeatable")
	pos, err := flagargs.Parse(cf.fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		cf.fs.Usage()
		return errors.New("cert needs a kind (node, admin, etcd-server) and a name")
	}
	kind, name := pos[0], pos[1]
	if *days < 1 {
		return errors.New("-days must be at least 1")
	}
	req := pki.Request{NotAfter: time.Now().Add(time.Duration(*days) * 24 * time.Hour)}
	authorize := func(*registry.Registry, context.Context) error { return nil }
	switch kind {
	case "node":
		if !master.ValidNodeName(name) {
			return fmt.Errorf("%w: %q", master.ErrInvalidNodeName, name)
		}
		// A client of etcd, and the server of the node's trace endpoint
		// (sdn/why), which clients verify by pki.NodeServerName.
		req.CommonName, req.Usage, req.DNSNames = pki.NodeUser(name), pki.ClientAuth|pki.ServerAuth, []string{pki.NodeServerName(name)}
		authorize = func(r *registry.Registry, ctx context.Context) error { return r.AuthorizeNode(ctx, name) }
	case "admin":
		if _, isNode := pki.NodeOf(name); isNode || name == pki.MasterUser {
			return fmt.Errorf("%q is not an administrator's name", name)
		}
		req.CommonName, req.Usage, req.Organization = name, pki.ClientAuth, []string{pki.AdminOrganization}
		if name != pki.AdminUser {
			authorize = func(r *registry.Registry, ctx context.Context) error { return r.AuthorizeAdmin(ctx, name) }
		}
	case "etcd-server":
		if len(sans) == 0 {
			return errors.New("etcd-server needs -san with the member's addresses")
		}
		r, err := sanRequest(name, nil, sans)
		if err != nil {
			return err
		}
		req.CommonName, req.Usage, req.DNSNames, req.IPs = name, r.Usage, r.DNSNames, r.IPs
		*noAuth = true
	default:
		return fmt.Errorf("unknown certificate kind %q (node, admin, etcd-server)", kind)
	}
	ca, created, err := cf.dir().EnsureCA("gvs cluster CA")
	if err != nil {
		return err
	}
	if created {
		fmt.Fprintf(out, "created the cluster CA in %s\n", cf.dir())
	}
	cert, key, err := ca.Issue(req)
	if err != nil {
		return err
	}
	if *outDir == "" {
		*outDir = name
	}
	files, err := pki.WriteBundle(*outDir, "tls", ca, cert, key)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "issued %s certificate %q (valid until %s): %s, %s, %s\n", kind, req.CommonName,
		req.NotAfter.Format(time.DateOnly), files.CA, files.Cert, files.Key)
	if *noAuth {
		return nil
	}
	reg, done, err := cf.registry()
	if err != nil {
		return fmt.Errorf("the certificate is written, but its etcd user is not: %w (run gvs-master authorize-node %s when gvs-master runs)", err, name)
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := authorize(reg, ctx); err != nil {
		return fmt.Errorf("the certificate is written, but its etcd user is not: %w", err)
	}
	fmt.Fprintf(out, "etcd user %q authorized\n", req.CommonName)
	return nil
}

func nodeAuthCmd(cmd string, args []string, out io.Writer) error {
	cf := newCertFlags("gvs-master "+cmd, out)
	pos, err := flagargs.Parse(cf.fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%s needs a node name", cmd)
	}
	reg, done, err := cf.registry()
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cmd == "revoke-node" {
		if err := reg.RevokeNode(ctx, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(out, "etcd user %q deleted: its certificate no longer opens etcd; its node and pod records are gone with its lease\n", pki.NodeUser(pos[0]))
		return nil
	}
	if err := reg.AuthorizeNode(ctx, pos[0]); err != nil {
		return err
	}
	fmt.Fprintf(out, "etcd user %q authorized\n", pki.NodeUser(pos[0]))
	return nil
}
