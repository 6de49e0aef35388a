package resp

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

// serveTest runs Serve with handler on a local port and returns a client
// connection and a reader of its replies.
func serveTest(t *testing.T, handler func(redcon.Conn, redcon.Command), closed func(redcon.Conn, error)) (net.Conn, *bufio.Reader) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- Serve(ln, handler, nil, closed) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		ln.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// echoArgs replies with the command's arguments joined by '|'.
func echoArgs(conn redcon.Conn, cmd redcon.Command) {
	parts := make([]string, len(cmd.Args))
	for i, a := range cmd.Args {
		parts[i] = string(a)
	}
	conn.WriteBulkString(strings.Join(parts, "|"))
}

func readBulk(t *testing.T, rd *bufio.Reader) string {
	t.Helper()
	head, err := rd.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(head, "$") {
		t.Fatalf("reply %q, want a bulk string", head)
	}
	body, err := rd.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(body, "\r\n")
}

func TestServeReadsPipelinesSplitCommandsAndInlineLines(t *testing.T) {
	c, rd := serveTest(t, echoArgs, nil)
	// Three commands in one write, then one sent a byte at a time, then
	// inline lines (one starting with '$', which is still inline).
	pipeline := "*2\r\n$4\r\nECHO\r\n$1\r\na\r\n*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv a l\r\n"
	if _, err := c.Write([]byte(pipeline)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ECHO|a", "PING", "SET|k|v a l"} {
		if got := readBulk(t, rd); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	for _, b := range []byte("*2\r\n$4\r\nECHO\r\n$11\r\nhello world\r\n") {
		if _, err := c.Write([]byte{b}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if got := readBulk(t, rd); got != "ECHO|hello world" {
		t.Fatalf("split command: got %q", got)
	}
	// Past the connection's own small buffer: one large argument, and a
	// pipeline whose last command straddles the first read.
	big := strings.Repeat("x", 100<<10)
	var many strings.Builder
	for i := range 40 {
		fmt.Fprintf(&many, "*2\r\n$4\r\nECHO\r\n$%d\r\n%d\r\n", len(strconv.Itoa(i)), i)
	}
	if _, err := c.Write([]byte(fmt.Sprintf("*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n%s", len(big), big, many.String()))); err != nil {
		t.Fatal(err)
	}
	if got := readBulk(t, rd); got != "ECHO|"+big {
		t.Fatalf("large argument: got %d bytes", len(got))
	}
	for i := range 40 {
		if got, want := readBulk(t, rd), fmt.Sprintf("ECHO|%d", i); got != want {
			t.Fatalf("pipelined after a large command: got %q, want %q", got, want)
		}
	}
	if _, err := c.Write([]byte("ECHO \"quoted words\" b\r\n\r\n$x y\r\n")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ECHO|quoted words|b", "$x|y"} {
		if got := readBulk(t, rd); got != want {
			t.Fatalf("inline: got %q, want %q", got, want)
		}
	}
}

func TestServeHoldsNoBuffersWhileAHandlerBlocks(t *testing.T) {
	type state struct{ partial, out, cmds int }
	blocked := make(chan state, 1)
	release := make(chan struct{})
	c, rd := serveTest(t, func(rc redcon.Conn, cmd redcon.Command) {
		if string(cmd.Args[0]) == "BLOCK" {
			cc := rc.(*conn)
			blocked <- state{partial: cap(cc.partial), out: cap(cc.out), cmds: len(cc.cmds)}
			<-release
		}
		rc.WriteString("OK")
	}, nil)
	// A reply written and flushed first, so a buffer was used.
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, _ := rd.ReadString('\n'); line != "+OK\r\n" {
		t.Fatalf("PING: %q", line)
	}
	if _, err := c.Write([]byte("*1\r\n$5\r\nBLOCK\r\n")); err != nil {
		t.Fatal(err)
	}
	if got := <-blocked; got != (state{}) {
		t.Errorf("a connection blocked in a handler holds %+v (capacities of its read and reply buffers, commands)", got)
	}
	close(release)
	if line, _ := rd.ReadString('\n'); line != "+OK\r\n" {
		t.Fatalf("BLOCK: %q", line)
	}
}

func TestServeDetachAndClose(t *testing.T) {
	closedWith := make(chan error, 2)
	detached := make(chan redcon.DetachedConn, 1)
	c, rd := serveTest(t, func(conn redcon.Conn, cmd redcon.Command) {
		switch string(cmd.Args[0]) {
		case "SUBSCRIBE":
			d := conn.Detach()
			d.WriteString("subscribed")
			d.Flush()
			detached <- d
		case "QUIT":
			conn.WriteString("bye")
			conn.Close()
		}
	}, func(_ redcon.Conn, err error) { closedWith <- err })
	if _, err := c.Write([]byte("SUBSCRIBE\r\nPING one\r\n")); err != nil {
		t.Fatal(err)
	}
	d := <-detached
	if line, _ := rd.ReadString('\n'); line != "+subscribed\r\n" {
		t.Fatalf("reply %q", line)
	}
	if err := <-closedWith; err == nil || err.Error() != "detached" {
		t.Fatalf("closed callback got %v, want detached", err)
	}
	// The command pipelined behind the Detach comes first, then new ones.
	if _, err := c.Write([]byte("PING two\r\n")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PING|one", "PING|two"} {
		cmd, err := d.ReadCommand()
		if err != nil {
			t.Fatal(err)
		}
		if got := string(cmd.Args[0]) + "|" + string(cmd.Args[1]); got != want {
			t.Fatalf("detached read %q, want %q", got, want)
		}
	}
	d.Close()

	c2, rd2 := serveTest(t, func(conn redcon.Conn, cmd redcon.Command) {
		conn.WriteString("bye")
		conn.Close()
	}, nil)
	if _, err := c2.Write([]byte("QUIT\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, _ := rd2.ReadString('\n'); line != "+bye\r\n" {
		t.Fatalf("QUIT: %q", line)
	}
	if _, err := rd2.ReadString('\n'); err == nil {
		t.Fatal("the connection stayed open after Close")
	}
}

func TestServeAnswersAFrameItCannotParse(t *testing.T) {
	c, rd := serveTest(t, echoArgs, nil)
	if _, err := c.Write([]byte("*1\r\n$x\r\n")); err != nil {
		t.Fatal(err)
	}
	line, _ := rd.ReadString('\n')
	if !strings.HasPrefix(line, "-ERR Protocol error") {
		t.Fatalf("reply %q, want a protocol error", line)
	}
	if _, err := rd.ReadString('\n'); err == nil {
		t.Fatal("the connection stayed open after a protocol error")
	}
}

// failingListener fails its first Accepts as a process out of file
// descriptors would, then accepts.
type failingListener struct {
	net.Listener
	failures int
	mu       sync.Mutex
	at       []time.Time
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if len(l.at) < l.failures {
		l.at = append(l.at, time.Now())
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// Accept errors other than a closed listener are waited out with a growing
// pause, not spun on, and connections are served again after them.
func TestServeWaitsOutAcceptErrors(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &failingListener{Listener: inner, failures: 5}
	served := make(chan error, 1)
	go func() { served <- Serve(ln, echoArgs, nil, nil) }()
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	rd := bufio.NewReader(c)
	if _, err := c.Write([]byte("*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n")); err != nil {
		t.Fatal(err)
	}
	if got := readBulk(t, rd); got != "ECHO|hi" {
		t.Fatalf("reply %q after the accept errors", got)
	}
	// The pauses double from 5 ms: 5, 10, 20 and 40 ms between the five.
	ln.mu.Lock()
	at := ln.at
	ln.mu.Unlock()
	if len(at) != 5 {
		t.Fatalf("%d failed accepts, want 5", len(at))
	}
	if spent := at[4].Sub(at[0]); spent < 75*time.Millisecond {
		t.Fatalf("five failed accepts within %v: no pause between them", spent)
	}
	inner.Close()
	if err := <-served; err != nil {
		t.Fatalf("Serve after its listener closed: %v", err)
	}
}

// A client that stops reading its replies is closed once they have waited
// ReplyTimeout, and another client is served meanwhile.
func TestAClientThatStopsReadingIsClosedAfterTheReplyTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	guarded := NewGuardedListener(ln, Limits{ReplyTimeout: 300 * time.Millisecond})
	big := strings.Repeat("x", 64<<10)
	closedWith := make(chan error, 2)
	served := make(chan error, 1)
	go func() {
		served <- Serve(guarded, func(c redcon.Conn, cmd redcon.Command) {
			if string(cmd.Args[0]) == "big" {
				c.WriteBulkString(big)
				return
			}
			c.WriteString("PONG")
		}, nil, func(_ redcon.Conn, err error) { closedWith <- err })
	}()
	t.Cleanup(func() {
		ln.Close()
		<-served
	})

	stuck, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	go func() { // 64 MiB of replies, never read
		for range 1024 {
			if _, err := stuck.Write([]byte("*1\r\n$3\r\nbig\r\n")); err != nil {
				return
			}
		}
	}()

	other, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := other.Write([]byte("*1\r\n$4\r\nping\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(other).ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("the other client got %q, %v", line, err)
	}

	select {
	case err := <-closedWith:
		if err == nil {
			t.Fatal("the stuck client's connection ended without an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the client that stopped reading was not closed")
	}
}
