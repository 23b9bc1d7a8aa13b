package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func TestCaptureArgs(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "needs a PORT and -w FILE"},
		{[]string{"vxlan0"}, "needs a PORT and -w FILE"},
		{[]string{"-w", "x.pcap"}, "needs a PORT and -w FILE"},
		{[]string{"vxlan0", "-w", "x.pcap", "tun0"}, "one PORT"},
		{[]string{"vxlan0", "-c", "x"}, "invalid value"},
		// Flags before and after PORT parse; then the daemon is missing.
		{[]string{"-d", "in", "vxlan0", "-w", "-", "-G", "2s"}, "is it running"},
	} {
		var stderr bytes.Buffer
		err := captureCmd(context.Background(), sock, false, &bytes.Buffer{}, &stderr, c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("capture %q: %v, want an error with %q", c.args, err, c.want)
		}
	}
}
