package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// StartControllers runs the real kube-controller-manager (its default
// controllers; no node CIDRs: gvs-master hands out node subnets) and
// kube-scheduler in the API server's namespace, as a cluster's control
// plane runs them, with the admin credentials. The controller manager
// signs ServiceAccount tokens' secrets with the API server's key and
// publishes the cluster CA to every namespace (kube-root-ca.crt), which
// in-cluster clients (gvs-switchd's DaemonSet, gvs-master) read. Stop
// stops them.
func (s *Server) StartControllers(ctx context.Context) error {
	bin := s.opts.BinDir
	cm, err := s.Lab.Start(ctx, s.NS, filepath.Join(s.Dir, "kube-controller-manager.log"),
		filepath.Join(bin, ControllerManagerBinary),
		"--kubeconfig", s.Kubeconfig,
		"--authentication-kubeconfig", s.Kubeconfig, "--authorization-kubeconfig", s.Kubeconfig,
		"--bind-address", "127.0.0.1",
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file", filepath.Join(s.Dir, "sa.key"),
		"--root-ca-file", s.CAFile,
		"--service-cluster-ip-range", s.opts.ServiceCIDR.String(),
		"--allocate-node-cidrs=false",
		"--profiling=false")
	if err != nil {
		return fmt.Errorf("kubetest: kube-controller-manager: %w", err)
	}
	s.ctrl = append(s.ctrl, cm)
	sch, err := s.Lab.Start(ctx, s.NS, filepath.Join(s.Dir, "kube-scheduler.log"),
		filepath.Join(bin, SchedulerBinary),
		"--kubeconfig", s.Kubeconfig,
		"--authentication-kubeconfig", s.Kubeconfig, "--authorization-kubeconfig", s.Kubeconfig,
		"--bind-address", "127.0.0.1",
		"--leader-elect=false",
		"--profiling=false")
	if err != nil {
		return fmt.Errorf("kubetest: kube-scheduler: %w", err)
	}
	s.ctrl = append(s.ctrl, sch)
	return nil
}

// writeEmbeddedKubeconfig writes a kubeconfig for this server with the CA,
// the client certificate and its key embedded, for a process that cannot
// see the harness's files (a node has its own /run).
func (s *Server) writeEmbeddedKubeconfig(path, certFile, keyFile string) error {
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(certFile)
	if err != nil {
		return err
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: s.URL, CertificateAuthorityData: ca}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	kc.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "user"}
	kc.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*kc, path)
}
