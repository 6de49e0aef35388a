package agqtest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// StableAddr finds a free loopback address for a node that must keep it
// across a restart. The port comes from below the ephemeral range, where
// outgoing connections (a client dialing it while nothing listens, or any
// other connection of the machine) never take it in the meantime.
func StableAddr(t testing.TB) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	if low > 11000 {
		for range 100 {
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(10000+rand.IntN(low-10000)))
			if ln, err := net.Listen("tcp", addr); err == nil {
				ln.Close()
				return addr
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
