package commands_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

// metric reads one sample (name with its labels) from /metrics.
func metric(t *testing.T, a *agqtest.Agq, sample string) float64 {
	t.Helper()
	res, err := http.Get("http://" + a.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	t.Fatalf("/metrics has no %s", sample)
	return 0
}

// rejectedConns reads agq_connections_rejected_total{reason}.
func rejectedConns(t *testing.T, a *agqtest.Agq, reason string) float64 {
	t.Helper()
	return metric(t, a, `agq_connections_rejected_total{reason="`+reason+`"}`)
}

// A thousand connections that trickle a byte a second and never
// authenticate, against a server capped at a thousand: each is closed at
// most the auth timeout after it connected, however much it sends, and
// while they trickle an admin and a worker with keys connect and work.
func TestTricklingUnauthenticatedConnectionsLockNobodyOut(t *testing.T) {
	t.Parallel()
	const n, timeout = 1000, 8 * time.Second
	a := agqtest.Start(t, func(c *config.Config) {
		c.MaxClients = n
		c.AuthTimeout = timeout
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var (
		wg        sync.WaitGroup
		open      atomic.Int64
		dialled   atomic.Int64
		late      atomic.Int64 // closed later than the timeout allows
		dialFails atomic.Int64
	)
	for range n {
		wg.Go(func() {
			conn, err := net.Dial("tcp", a.Addr)
			if err != nil {
				dialFails.Add(1)
				return
			}
			defer conn.Close()
			open.Add(1)
			defer open.Add(-1)
			dialled.Add(1)
			start := time.Now()
			// A byte at a time of a command that never ends; a closed
			// connection fails a write or the read below sees it.
			go func() {
				for range 60 {
					if _, err := conn.Write([]byte("P")); err != nil {
						return
					}
					time.Sleep(time.Second)
				}
			}()
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			var b [64]byte
			for {
				if _, err := conn.Read(b[:]); err != nil {
					break
				}
			}
			if time.Since(start) > timeout+2*time.Second {
				late.Add(1)
			}
		})
	}
	// Once the server has seen them all (a flood of fresh ones past the
	// cap is turned away) and they are past their grace, keyholders connect
	// and work while the rest still trickle.
	agqtest.Eventually(t, 20*time.Second, func() error {
		seen := metric(t, a, "agq_connections_total") + rejectedConns(t, a, "unauthenticated_limit") + rejectedConns(t, a, "address_limit")
		if seen < n {
			return fmt.Errorf("the server has seen %v of %d connections", seen, n)
		}
		return nil
	})
	time.Sleep(1100 * time.Millisecond)
	admin := a.Admin(t)
	w := registerWorker(t, a, "keyholder", "t")
	id := submit(t, admin, map[string]any{"type": "t", "queue": "trickle"})
	if _, d, ok := w.pop(t, "5", "trickle"); !ok || d.JobID != id {
		t.Fatalf("the worker got %+v, %v", d, ok)
	}
	if err := w.update(ctx, id, map[string]any{"status": "completed"}); err != nil {
		t.Fatal(err)
	}
	if v := getJob(t, admin, id); v.Status != "completed" {
		t.Fatalf("job = %+v", v)
	}
	still := open.Load()
	if still == 0 {
		t.Fatal("no trickling connection was open any more when the keyholders had worked")
	}
	wg.Wait()
	if dialFails.Load() > 0 || late.Load() > 0 {
		t.Fatalf("of %d trickling connections, %d could not connect and %d stayed open past the %v auth timeout",
			n, dialFails.Load(), late.Load(), timeout)
	}
	t.Logf("%d of the %d trickling connections were still open while the keyholders worked", still, n)
	// Past half of max-clients, newcomers were turned away or closed the
	// oldest; the rest timed out.
	if r := rejectedConns(t, a, "unauthenticated_limit"); r < n-n/2 {
		t.Errorf("unauthenticated_limit refusals and closures = %v, want at least %d", r, n-n/2)
	}
	if r := rejectedConns(t, a, "auth_timeout"); r < 1 {
		t.Errorf("auth_timeout closures = %v", r)
	}
	// The keyholders' own connections were never taken for trickling ones.
	if err := admin.Ping(ctx).Err(); err != nil {
		t.Fatalf("admin after the trickle: %v", err)
	}
}

// Past a cap on unauthenticated connections — in all, or from one address
// — a newcomer closes the oldest one rather than being turned away.
func TestNewcomersDisplaceTheOldestUnauthenticated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, reason string
		cap          func(*config.Config)
	}{
		{"InAll", "unauthenticated_limit", func(c *config.Config) { c.MaxUnauth = 3 }},
		{"FromOneAddress", "address_limit", func(c *config.Config) { c.MaxUnauth, c.MaxUnauthPerAddr = 100, 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := agqtest.Start(t, tc.cap, func(c *config.Config) { c.AuthTimeout = time.Minute })
			ping := func(conn net.Conn) error {
				if _, err := conn.Write([]byte("PING\r\n")); err != nil {
					return err
				}
				if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || line != "+PONG\r\n" {
					return fmt.Errorf("PING = %q, %v", line, err)
				}
				return nil
			}
			dial := func() net.Conn {
				conn, err := net.Dial("tcp", a.Addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
				conn.SetDeadline(time.Now().Add(20 * time.Second))
				return conn
			}
			var conns []net.Conn
			for range 3 {
				conn := dial()
				// A reply proves the server counted this connection.
				if err := ping(conn); err != nil {
					t.Fatal(err)
				}
				conns = append(conns, conn)
			}
			// The three are within their grace: a fourth is turned away.
			line, err := bufio.NewReader(dial()).ReadString('\n')
			if err != nil || line != "-ERR too many connections waiting to authenticate; retry later\r\n" {
				t.Fatalf("a fourth connection at once: %q, %v", line, err)
			}
			// Past it, a fourth closes the oldest.
			time.Sleep(1100 * time.Millisecond)
			conn := dial()
			if err := ping(conn); err != nil {
				t.Fatal(err)
			}
			conns = append(conns, conn)
			if _, err := conns[0].Read(make([]byte, 1)); err == nil {
				t.Fatal("the oldest unauthenticated connection is still open")
			}
			for i, conn := range conns[1:] {
				if err := ping(conn); err != nil {
					t.Fatalf("connection %d: %v", i+2, err)
				}
			}
			if r := rejectedConns(t, a, tc.reason); r != 2 {
				t.Fatalf("%s refusals and closures = %v, want 2", tc.reason, r)
			}
			// A client with a key gets in, displacing one more while it
			// authenticates, and then no longer counts.
			if err := a.Admin(t).Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			if r := rejectedConns(t, a, tc.reason); r != 3 {
				t.Fatalf("%s refusals and closures = %v, want 3", tc.reason, r)
			}
		})
	}
}
