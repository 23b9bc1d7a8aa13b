package lab

import (
	"reflect"
	"testing"
	"time"
)

const pingOK = `PING 172.30.0.12 (172.30.0.12) 56(84) bytes of data.
64 bytes from 172.30.0.12: icmp_seq=1 ttl=64 time=0.045 ms
64 bytes from 172.30.0.12: icmp_seq=2 ttl=64 time=0.120 ms
64 bytes from 172.30.0.12: icmp_seq=3 ttl=64 time=0.060 ms
64 bytes from 172.30.0.12: icmp_seq=4 ttl=64 time=1.50 ms

--- 172.30.0.12 ping statistics ---
4 packets transmitted, 4 received, 0% packet loss, time 612ms
rtt min/avg/max/mdev = 0.045/0.431/1.500/0.618 ms
`

const pingLoss = `PING 172.30.0.99 (172.30.0.99) 1000(1028) bytes of data.
1008 bytes from 172.30.0.99: icmp_seq=2 ttl=64 time=12 ms
1008 bytes from 172.30.0.99: icmp_seq=2 ttl=64 time=13 ms (DUP!)

--- 172.30.0.99 ping statistics ---
4 packets transmitted, 1 received, +1 duplicates, 75% packet loss, time 3050ms
rtt min/avg/max/mdev = 12.000/12.000/12.000/0.000 ms
`

const pingNone = `PING 172.30.0.99 (172.30.0.99) 56(84) bytes of data.
From 172.30.0.11 icmp_seq=1 Destination Host Unreachable

--- 172.30.0.99 ping statistics ---
3 packets transmitted, 0 received, +3 errors, 100% packet loss, time 2046ms
pipe 3
`

func TestParsePing(t *testing.T) {
	us := time.Microsecond
	tests := []struct {
		name string
		out  string
		want PingResult
		ok   bool
	}{
		{"ok", pingOK, PingResult{Transmitted: 4, Received: 4, Min: 45 * us, Avg: 431 * us, Max: 1500 * us, Mdev: 618 * us,
			P50: 60 * us, P90: 1500 * us, P99: 1500 * us}, true},
		{"loss", pingLoss, PingResult{Transmitted: 4, Received: 1, Loss: 0.75, Min: 12 * time.Millisecond, Avg: 12 * time.Millisecond,
			Max: 12 * time.Millisecond, P50: 12 * time.Millisecond, P90: 12 * time.Millisecond, P99: 12 * time.Millisecond}, true},
		{"none", pingNone, PingResult{Transmitted: 3, Loss: 1}, true},
		{"garbage", "ping: unknown host\n", PingResult{}, false},
		{"empty", "", PingResult{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePing([]byte(tt.out))
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			got.RTTs = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
	r, _ := ParsePing([]byte(pingOK))
	if len(r.RTTs) != 4 || r.RTTs[3] != 1500*us {
		t.Errorf("RTTs = %v", r.RTTs)
	}
}

func FuzzParsePing(f *testing.F) {
	for _, s := range []string{pingOK, pingLoss, pingNone, "", "1 packets transmitted, 9 received\n",
		"rtt min/avg/max/mdev = 1e308/NaN/-1/x ms\n", "icmp_seq=1 time=99999999999999 ms\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParsePing(b)
		if err != nil {
			return
		}
		if r.Loss < 0 || r.Loss > 1 {
			t.Fatalf("loss %v out of range", r.Loss)
		}
		if len(r.RTTs) > 0 && (r.P50 > r.P90 || r.P90 > r.P99) {
			t.Fatalf("percentiles out of order: %v %v %v", r.P50, r.P90, r.P99)
		}
	})
}
