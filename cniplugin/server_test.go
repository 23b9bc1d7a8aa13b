package cniplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// fakeBackend records attachments in memory.
type fakeBackend struct {
	mu       sync.Mutex
	attached map[string]Lease
	failNext error
	onDetach func() // runs in Detach, before it detaches (nil: nothing)
}

func (f *fakeBackend) Attach(_ context.Context, l Lease) (Attachment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failNext; err != nil {
		f.failNext = nil
		return Attachment{}, err
	}
	for _, o := range f.attached {
		if o.IP == l.IP || o.Port == l.Port {
			return Attachment{}, fmt.Errorf("duplicate address or port: %v %d", l.IP, l.Port)
		}
	}
	f.attached[l.Key()] = l
	return Attachment{MAC: "0a:58:0a:80:00:02", Prefix: netip.PrefixFrom(l.IP, 23), Gateway: netip.MustParseAddr("10.128.0.1"),
		Routes: []Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("10.128.0.1")}, {Dst: netip.MustParsePrefix("10.128.0.0/14")}}}, nil
}

func (f *fakeBackend) Detach(_ context.Context, l Lease) error {
	if f.onDetach != nil {
		f.onDetach()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.attached, l.Key())
	return nil
}

func (f *fakeBackend) Check(_ context.Context, l Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.attached[l.Key()]; !ok {
		return errors.New("missing: interface")
	}
	return nil
}

func newTestServer(t *testing.T, subnet string) (*Server, *fakeBackend, string) {
	t.Helper()
	return newTestServerWith(t, subnet, nil)
}

// newTestServerWith is newTestServer with set, if not nil, changing the
// configuration first.
func newTestServerWith(t *testing.T, subnet string, set func(*ServerConfig)) (*Server, *fakeBackend, string) {
	t.Helper()
	m, err := OpenIPAM(t.TempDir(), netip.MustParsePrefix(subnet), 1000)
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBackend{attached: map[string]Lease{}}
	cfg := ServerConfig{IPAM: m, Backend: fb}
	if set != nil {
		set(&cfg)
	}
	s := NewServer(cfg)
	sock := filepath.Join(t.TempDir(), "cni.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, l); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, fb, sock
}

const testConf = `{"cniVersion":"1.1.0","name":"pods","type":"gvs"}`

func call(t *testing.T, sock, cmd, id, conf string) *Response {
	t.Helper()
	resp, err := Call(context.Background(), sock, &Request{Command: cmd, ContainerID: id, Netns: "/run/netns/" + id,
		IfName: "eth0", Args: "K8S_POD_NAMESPACE=alpha;K8S_POD_NAME=" + id, Config: json.RawMessage(conf)})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func code(r *Response) uint {
	if r.Error == nil {
		return 0
	}
	return r.Error.Code
}

func TestServerVerbs(t *testing.T) {
	s, fb, sock := newTestServer(t, "10.128.0.0/29")
	r := call(t, sock, "ADD", "c1", testConf)
	if r.Error != nil {
		t.Fatal(r.Error)
	}
	res, err := types100.NewResult(r.Result)
	if err != nil {
		t.Fatal(err)
	}
	res100 := res.(*types100.Result)
	if len(res100.IPs) != 1 || res100.IPs[0].Address.String() != "10.128.0.2/23" || len(res100.Routes) != 2 ||
		res100.Interfaces[0].Sandbox != "/run/netns/c1" || *res100.IPs[0].Interface != 0 {
		t.Errorf("result %s", r.Result)
	}
	if l, _ := s.IPAM().Get("c1", "eth0"); l.Project != "alpha" || l.PodName != "c1" {
		t.Errorf("lease %+v: project/pod name from CNI_ARGS not kept", l)
	}
	if c := code(call(t, sock, "ADD", "c1", testConf)); c != ErrCodeInterfaceExists {
		t.Errorf("second ADD: code %d, want %d", c, ErrCodeInterfaceExists)
	}
	if c := code(call(t, sock, "CHECK", "c1", testConf)); c != 0 {
		t.Errorf("CHECK: code %d", c)
	}
	if c := code(call(t, sock, "CHECK", "nobody", testConf)); c != types.ErrUnknownContainer {
		t.Errorf("CHECK of an unknown container: code %d, want 3", c)
	}
	if c := code(call(t, sock, "ADD", "bad", `{"cniVersion":"1.1.0","type":"gvs"}`)); c != types.ErrInvalidNetworkConfig {
		t.Errorf("ADD with no name: code %d, want 7", c)
	}
	if c := code(call(t, sock, "STATUS", "", testConf)); c != 0 {
		t.Errorf("STATUS: code %d", c)
	}
	// A failing attach leaves no lease.
	fb.failNext = ErrInterfaceExists
	if c := code(call(t, sock, "ADD", "c2", testConf)); c != ErrCodeInterfaceExists {
		t.Errorf("ADD onto an existing interface: code %d", c)
	}
	if _, ok := s.IPAM().Get("c2", "eth0"); ok {
		t.Error("a failed ADD kept its lease")
	}
	// Exhaustion: .2 is taken, .3 .. .6 remain.
	for i := range 4 {
		if r := call(t, sock, "ADD", fmt.Sprint("x", i), testConf); r.Error != nil {
			t.Fatal(r.Error)
		}
	}
	r = call(t, sock, "ADD", "x9", testConf)
	if code(r) != ErrCodeSubnetExhausted {
		t.Errorf("ADD into a full subnet: %+v, want code %d", r.Error, ErrCodeSubnetExhausted)
	}
	// DEL is idempotent.
	for range 2 {
		if c := code(call(t, sock, "DEL", "c1", testConf)); c != 0 {
			t.Errorf("DEL: code %d", c)
		}
	}
	if c := code(call(t, sock, "DEL", "never-seen", testConf)); c != 0 {
		t.Errorf("DEL of an unknown container: code %d", c)
	}
	// GC keeps only x0.
	gc := `{"cniVersion":"1.1.0","name":"pods","type":"gvs","cni.dev/valid-attachments":[{"containerID":"x0","ifname":"eth0"}]}`
	if c := code(call(t, sock, "GC", "", gc)); c != 0 {
		t.Errorf("GC: code %d", c)
	}
	if ls := s.IPAM().Leases(); len(ls) != 1 || ls[0].ContainerID != "x0" || len(fb.attached) != 1 {
		t.Errorf("after GC: leases %v, attached %v", ls, fb.attached)
	}
}

func TestServerConcurrentAddDel(t *testing.T) {
	s, fb, sock := newTestServer(t, "10.128.0.0/23")
	const n = 50
	var wg sync.WaitGroup
	ips := make([]string, n)
	for i := range n {
		wg.Go(func() {
			r := call(t, sock, "ADD", fmt.Sprint("pod", i), testConf)
			if r.Error != nil {
				t.Error(r.Error)
				return
			}
			res, _ := types100.NewResult(r.Result)
			ips[i] = res.(*types100.Result).IPs[0].Address.String()
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, ip := range ips {
		if seen[ip] {
			t.Errorf("address %s given twice", ip)
		}
		seen[ip] = true
	}
	for i := range n {
		wg.Go(func() {
			if r := call(t, sock, "DEL", fmt.Sprint("pod", i), testConf); r.Error != nil {
				t.Error(r.Error)
			}
		})
	}
	wg.Wait()
	if len(s.IPAM().Leases()) != 0 || len(fb.attached) != 0 {
		t.Errorf("leaked: %d leases, %d attachments", len(s.IPAM().Leases()), len(fb.attached))
	}
}

func TestCallUnreachable(t *testing.T) {
	_, err := Call(context.Background(), filepath.Join(t.TempDir(), "none.sock"), &Request{Command: "STATUS"})
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("err = %v, want ErrUnreachable", err)
	}
}
