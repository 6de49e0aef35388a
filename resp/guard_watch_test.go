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

func TestGuardWatchPeer(t *testing.T) {
	t.Parallel()

	t.Run("ClientClosingWhileHandlerBlocksClosesGone", func(t *testing.T) {
		t.Parallel()
		srv := guardStartServer(t, Limits{}, nil)
		c := guardDial(t, srv.addr)
		c.Write([]byte("BLOCK\r\n"))
		b := srv.nextBlock(t)
		c.Close()
		guardResult(t, b, "gone")
	})

	t.Run("BytesPipelinedDuringWatchAreServedAfterStop", func(t *testing.T) {
		t.Parallel()
		srv := guardStartServer(t, Limits{}, nil)
		c := guardDial(t, srv.addr)
		c.Write([]byte("BLOCK\r\n"))
		b := srv.nextBlock(t)
		c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
		guardEventually(t, "the watch has read the PING", func() bool { return guardPending(b.conn) == 14 })
		close(b.release)
		guardResult(t, b, "released")
		guardExpect(t, c, "+RELEASED\r\n+PONG\r\n")
	})

	t.Run("StopWithoutActivityLeavesConnUsable", func(t *testing.T) {
		t.Parallel()
		srv := guardStartServer(t, Limits{}, nil)
		c := guardDial(t, srv.addr)
		c.Write([]byte("BLOCK\r\n"))
		close(srv.nextBlock(t).release)
		guardExpect(t, c, "+RELEASED\r\n")
		c.Write([]byte("PING\r\n"))
		guardExpect(t, c, "+PONG\r\n")
	})

	t.Run("IdleTimeoutIsSuspendedDuringWatchAndRestoredAfter", func(t *testing.T) {
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
		guardEventually(t, "the watch has read the PING", func() bool { return guardPending(b.conn) == 6 })
		close(b.release)
		guardResult(t, b, "released")
		if got := guardReadToClose(t, c); got != "+RELEASED\r\n+PONG\r\n" {
			t.Fatalf("got %q", got)
		}
	})

	t.Run("CloseDuringWatchEndsIt", func(t *testing.T) {
		t.Parallel()
		_, server := guardTCPPair(t)
		gc := NewGuardedConn(server, Limits{})
		gone, stop := gc.WatchPeer()
		gc.Close()
		select {
		case <-gone:
		case <-time.After(10 * time.Second):
			t.Fatal("gone not closed after Close")
		}
		stop()
		stop()
	})

	t.Run("PeerErrorFollowsPendingBytes", func(t *testing.T) {
		t.Parallel()
		client, server := guardTCPPair(t)
		gc := NewGuardedConn(server, Limits{})
		gone, stop := gc.WatchPeer()
		client.Write([]byte("PING\r\n"))
		client.Close()
		select {
		case <-gone:
		case <-time.After(10 * time.Second):
			t.Fatal("gone not closed after the peer closed")
		}
		stop()
		got, err := io.ReadAll(gc)
		if err != nil || string(got) != "PING\r\n" {
			t.Fatalf("got %q, %v", got, err)
		}
		if gone, _ := gc.WatchPeer(); !guardIsClosed(gone) {
			t.Fatal("a watch after the peer left must report it gone")
		}
	})

	t.Run("WatchStopsReadingPastOneMiB", func(t *testing.T) {
		t.Parallel()
		client, server := guardTCPPair(t)
		gc := NewGuardedConn(server, Limits{})
		_, stop := gc.WatchPeer()
		body := strings.Repeat("x", 3<<20)
		input := "*1\r\n$3145728\r\n" + body + "\r\n"
		go client.Write([]byte(input))
		guardEventually(t, "the watch has buffered 1 MiB", func() bool {
			return guardPending(gc) > guardWatchMaxPending
		})
		stop()
		if n := guardPending(gc); n > guardWatchMaxPending+guardWatchReadSize {
			t.Fatalf("the watch buffered %d bytes", n)
		}
		got := make([]byte, len(input))
		if _, err := io.ReadFull(gc, got); err != nil || !bytes.Equal(got, []byte(input)) {
			t.Fatalf("read back %d bytes, %v", len(got), err)
		}
	})
}

func guardIsClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
