package commands_test

import (
	"bufio"
	"context"
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

// rejectedConns reads agq_connections_rejected_total{reason} from /metrics.
func rejectedConns(t *testing.T, a *agqtest.Agq, reason string) float64 {
	t.Helper()
	res, err := http.Get("http://" + a.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	prefix := `agq_connections_rejected_total{reason="` + reason + `"} `
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	t.Fatalf("/metrics has no %s", prefix)
	return 0
}

// A thousand connections that trickle a byte a second and never
// authenticate, against a server capped at a thousand: each is closed at
// most the auth timeout after it connected, however much it sends, and
// while they trickle an admin and a worker with keys connect and work.
func TestTricklingUnauthenticatedConnectionsLockNobodyOut(t *testing.T) {
	t.Parallel()
	const n, timeout = 1000, 5 * time.Second
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
	// While they trickle, keyholders connect and work.
	agqtest.Eventually(t, 20*time.Second, func() error {
		if dialled.Load()+dialFails.Load() < n {
			return context.DeadlineExceeded // not all dialled yet
		}
		return nil
	})
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
	// One address past its cap closed its own oldest; the rest timed out.
	if r := rejectedConns(t, a, "address_limit"); r < n-256 {
		t.Errorf("address_limit closures = %v, want at least %d", r, n-256)
	}
	if r := rejectedConns(t, a, "auth_timeout"); r < 1 {
		t.Errorf("auth_timeout closures = %v", r)
	}
	// The keyholders' own connections were never taken for trickling ones.
	if err := admin.Ping(ctx).Err(); err != nil {
		t.Fatalf("admin after the trickle: %v", err)
	}
}

// Past the cap on unauthenticated connections, a newcomer closes the
// oldest one rather than being turned away.
func TestNewcomersDisplaceTheOldestUnauthenticated(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, func(c *config.Config) {
		c.MaxUnauth = 3
		c.AuthTimeout = time.Minute
	})
	var conns []net.Conn
	for range 4 {
		conn, err := net.Dial("tcp", a.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		// A reply proves the server counted this connection.
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || line != "+PONG\r\n" {
			t.Fatalf("PING = %q, %v", line, err)
		}
		conns = append(conns, conn)
	}
	if _, err := conns[0].Read(make([]byte, 1)); err == nil {
		t.Fatal("the oldest unauthenticated connection is still open")
	}
	for i, conn := range conns[1:] {
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			t.Fatalf("connection %d: %v", i+2, err)
		}
		if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || line != "+PONG\r\n" {
			t.Fatalf("connection %d: PING = %q, %v", i+2, line, err)
		}
	}
	if r := rejectedConns(t, a, "unauthenticated_limit"); r != 1 {
		t.Fatalf("unauthenticated_limit closures = %v, want 1", r)
	}
	// An authenticated connection no longer counts.
	admin := a.Admin(t)
	if err := admin.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if r := rejectedConns(t, a, "unauthenticated_limit"); r != 2 {
		t.Fatalf("unauthenticated_limit closures = %v, want 2 (the admin's connection displaced one while it authenticated)", r)
	}
}
