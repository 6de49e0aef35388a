package resp

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

func guardTCPPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client = guardDial(t, ln.Addr().String())
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}

func guardPending(c *GuardedConn) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.store) - c.off
}

// guardEventually polls cond until it holds or the deadline passes.
func guardEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

func guardResult(t *testing.T, b *guardBlock, want string) {
	t.Helper()
	select {
	case got := <-b.result:
		if got != want {
			t.Fatalf("handler ended %s, want %s", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("handler did not end %s", want)
	}
}

func TestGuardPark(t *testing.T) {
	t.Parallel()

	t.Run("ClientClosingWhileHandlerParksIsSeen", func(t *testing.T) {
		t.Parallel()
		srv := guardStartServer(t, Limits{}, nil)
		c := guardDial(t, srv.addr)
		c.Write([]byte("BLOCK\r\n"))
		b := srv.nextBlock(t)
		c.Close()
		guardResult(t, b, "gone")
		if !b.conn.PeerGone() {
			t.Fatal("PeerGone is false after the peer left")
		}
	})

	t.Run("BytesPipelinedWhileParkedAreServedAfter", func(t *testing.T) {
		t.Parallel()
		srv := guardStartServer(t, Limits{}, nil)
		c := guardDial(t, srv.addr)
		c.Write([]byte("BLOCK\r\n"))
		b := srv.nextBlock(t)
		c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
		guardEventually(t, "the park has read the PING", func() bool { return guardPending(b.conn) == 14 })
		b.release()
		guardResult(t, b, "released")
		guardExpect(t, c, "+RELEASED\r\n+PONG\r\n")
	})

	t.Run("UnparkWithoutActivityLeavesConnUsable", func(t *testing.T) {
		t.Parallel()
		srv := guardStartServer(t, Limits{}, nil)
		c := guardDial(t, srv.addr)
		c.Write([]byte("BLOCK\r\n"))
		srv.nextBlock(t).release()
		guardExpect(t, c, "+RELEASED\r\n")
		c.Write([]byte("PING\r\n"))
		guardExpect(t, c, "+PONG\r\n")
	})

	t.Run("IdleTimeoutIsSuspendedWhileParkedAndRestoredAfter", func(t *testing.T) {
		t.Parallel()
		const idle = 200 * time.Millisecond
		srv := guardStartServer(t, Limits{}, func(conn redcon.Conn) bool {
			conn.NetConn().(*GuardedConn).SetIdleTimeout(idle)
			return true
		})
		c := guardDial(t, srv.addr)
		c.Write([]byte("BLOCK\r\n"))
		b := srv.nextBlock(t)
		time.Sleep(3 * idle) // the client waits on the handler longer than idle
		c.Write([]byte("PING\r\n"))
		guardEventually(t, "the park has read the PING", func() bool { return guardPending(b.conn) == 6 })
		b.release()
		guardResult(t, b, "released")
		if got := guardReadToClose(t, c); got != "+RELEASED\r\n+PONG\r\n" {
			t.Fatalf("got %q", got)
		}
	})

	t.Run("UnparkBeforeParkEndsItAtOnceAndResetForgetsIt", func(t *testing.T) {
		t.Parallel()
		_, server := guardTCPPair(t)
		gc := NewGuardedConn(server, Limits{})
		gc.Unpark()
		if gone := gc.Park(time.Now().Add(10 * time.Second)); gone {
			t.Fatal("Park reported the peer gone")
		}
		gc.Unpark()
		gc.ResetPark()
		start := time.Now()
		gc.Park(time.Now().Add(100 * time.Millisecond))
		if time.Since(start) < 100*time.Millisecond {
			t.Fatal("a forgotten Unpark still ended the next Park")
		}
	})

	t.Run("UnparkFromAnotherGoroutineEndsAParkedRead", func(t *testing.T) {
		t.Parallel()
		_, server := guardTCPPair(t)
		gc := NewGuardedConn(server, Limits{})
		time.AfterFunc(50*time.Millisecond, gc.Unpark)
		start := time.Now()
		if gone := gc.Park(time.Time{}); gone || time.Since(start) > 5*time.Second {
			t.Fatalf("Park = %v after %v", gone, time.Since(start))
		}
	})

	t.Run("CloseWhileParkedEndsIt", func(t *testing.T) {
		t.Parallel()
		_, server := guardTCPPair(t)
		gc := NewGuardedConn(server, Limits{})
		time.AfterFunc(50*time.Millisecond, func() { gc.Close() })
		if !gc.Park(time.Now().Add(10 * time.Second)) {
			t.Fatal("Park did not report the closed connection")
		}
	})

	t.Run("PeerErrorFollowsPendingBytes", func(t *testing.T) {
		t.Parallel()
		client, server := guardTCPPair(t)
		gc := NewGuardedConn(server, Limits{})
		client.Write([]byte("PING\r\n"))
		client.Close()
		if !gc.Park(time.Now().Add(10 * time.Second)) {
			t.Fatal("Park did not report the peer leaving")
		}
		got, err := io.ReadAll(gc)
		if err != nil || string(got) != "PING\r\n" {
			t.Fatalf("got %q, %v", got, err)
		}
		if !gc.Park(time.Now().Add(10 * time.Second)) {
			t.Fatal("a Park after the peer left must report it gone")
		}
	})

	t.Run("ParkStopsReadingPastOneMiB", func(t *testing.T) {
		t.Parallel()
		client, server := guardTCPPair(t)
		gc := NewGuardedConn(server, Limits{})
		body := strings.Repeat("x", 3<<20)
		input := "*1\r\n$3145728\r\n" + body + "\r\n"
		go client.Write([]byte(input))
		parked := make(chan bool, 1)
		go func() { parked <- gc.Park(time.Now().Add(30 * time.Second)) }()
		guardEventually(t, "the park has buffered 1 MiB", func() bool {
			return guardPending(gc) > guardParkMaxPending
		})
		time.Sleep(50 * time.Millisecond)
		if n := guardPending(gc); n > guardParkMaxPending+guardParkReadSize {
			t.Fatalf("the park buffered %d bytes", n)
		}
		gc.Unpark()
		if gone := <-parked; gone {
			t.Fatal("Park reported the peer gone")
		}
		got := make([]byte, len(input))
		if _, err := io.ReadFull(gc, got); err != nil || !bytes.Equal(got, []byte(input)) {
			t.Fatalf("read back %d bytes, %v", len(got), err)
		}
	})
}
