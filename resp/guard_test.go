package resp

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

// guardTestServer is a real redcon server behind a guarded listener.
type guardTestServer struct {
	addr    string
	blocked chan *guardBlock // BLOCK handlers announce themselves here
}

// guardBlock is a BLOCK handler parked until released.
type guardBlock struct {
	conn     *GuardedConn
	released chan struct{}
	result   chan string
}

// release ends the BLOCK handler as a wake-up would.
func (b *guardBlock) release() {
	close(b.released)
	b.conn.Unpark()
}

func guardStartServer(t *testing.T, lim Limits, accept func(redcon.Conn) bool) *guardTestServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &guardTestServer{addr: ln.Addr().String(), blocked: make(chan *guardBlock, 16)}
	served := make(chan error, 1)
	go func() { served <- Serve(NewGuardedListener(ln, lim), s.handle, accept, nil) }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return s
}

func (s *guardTestServer) handle(conn redcon.Conn, cmd redcon.Command) {
	switch strings.ToUpper(string(cmd.Args[0])) {
	case "PING":
		conn.WriteString("PONG")
	case "ECHO":
		conn.WriteBulk(cmd.Args[len(cmd.Args)-1])
	case "AUTH":
		conn.NetConn().(*GuardedConn).SetIdleTimeout(0)
		conn.WriteString("OK")
	case "BLOCK":
		gc := conn.NetConn().(*GuardedConn)
		gc.ResetPark()
		b := &guardBlock{conn: gc, released: make(chan struct{}), result: make(chan string, 1)}
		s.blocked <- b
		for deadline := time.Now().Add(30 * time.Second); ; {
			if gc.Park(deadline) {
				b.result <- "gone"
				return
			}
			select {
			case <-b.released:
				b.result <- "released"
				conn.WriteString("RELEASED")
				return
			default:
			}
			if time.Now().After(deadline) {
				b.result <- "timed out"
				return
			}
		}
	default:
		conn.WriteError("ERR unknown command")
	}
}

func (s *guardTestServer) nextBlock(t *testing.T) *guardBlock {
	t.Helper()
	select {
	case b := <-s.blocked:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("no BLOCK handler started")
		return nil
	}
}

func guardDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// guardExpect reads exactly len(want) bytes and compares them.
func guardExpect(t *testing.T, c net.Conn, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading %q: got %q, %v", want, got, err)
	}
	if string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// guardReadToClose reads until the server closes the connection.
func guardReadToClose(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var out bytes.Buffer
	_, err := io.Copy(&out, c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("connection not closed: %v (read %q)", err, guardTail(out.String()))
	}
	return out.String()
}

func guardTail(s string) string {
	return s[max(0, len(s)-200):]
}

func guardRandom(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestGuardRejectsAttacks(t *testing.T) {
	t.Parallel()
	lim := Limits{MaxArgs: 1024, MaxBulk: 1 << 20, MaxInline: 4 << 10, MaxCommand: 4 << 20}
	srv := guardStartServer(t, lim, nil)

	// Another client must be served throughout.
	pinger := guardDial(t, srv.addr)
	stopPing := make(chan struct{})
	pingDone := make(chan error, 1)
	pongs := 0
	go func() {
		buf := make([]byte, 7)
		for {
			select {
			case <-stopPing:
				pingDone <- nil
				return
			default:
			}
			pinger.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := pinger.Write([]byte("PING\r\n")); err != nil {
				pingDone <- err
				return
			}
			if _, err := io.ReadFull(pinger, buf); err != nil || string(buf) != "+PONG\r\n" {
				pingDone <- errors.Join(errors.New("bad PONG: "+string(buf)), err)
				return
			}
			pongs++
			time.Sleep(time.Millisecond)
		}
	}()

	tests := []struct {
		name    string
		input   []byte
		endless []byte // written again and again after input
		want    string // the whole reply; empty means any protocol error last
	}{
		{"BulkLengthThatOverflowsRedcon", []byte("*1\r\n$9223372036854775807\r\n"), nil,
			"-ERR Protocol error: bulk length exceeds limit\r\n"},
		{"ArgumentCountThatSpinsRedcon", []byte("*9000000000000000000\r\n"), nil,
			"-ERR Protocol error: too many arguments\r\n"},
		{"GigabyteBulkHeader", []byte("*1\r\n$1073741824\r\n"), bytes.Repeat([]byte("x"), 64<<10),
			"-ERR Protocol error: bulk length exceeds limit\r\n"},
		{"MegabyteOfGarbage", guardRandom(1<<20, 1), nil, ""},
		{"NeverEndingInlineLine", []byte("PING "), bytes.Repeat([]byte("a"), 4<<10),
			"-ERR Protocol error: too big inline request\r\n"},
		{"NegativeArgumentCount", []byte("*-1\r\n"), nil,
			"-ERR Protocol error: invalid multibulk length\r\n"},
		{"ZeroArgumentCount", []byte("*0\r\n"), nil,
			"-ERR Protocol error: invalid multibulk length\r\n"},
		{"ByteOtherThanDollar", []byte("*2\r\n$3\r\nGET\r\nx"), nil,
			"-ERR Protocol error: expected '$', got 'x'\r\n"},
		{"BareLineFeedAfterCount", []byte("*1\n$4\r\nPING\r\n"), nil,
			"-ERR Protocol error: invalid multibulk length\r\n"},
		{"BareLineFeedAfterBulkLength", []byte("*1\r\n$4\nPING\r\n"), nil,
			"-ERR Protocol error: invalid bulk length\r\n"},
		{"BodyWithoutCRLF", []byte("*1\r\n$4\r\nPINGPONG"), nil,
			"-ERR Protocol error: invalid bulk length\r\n"},
		{"TooManyArguments", []byte("*1025\r\n"), nil,
			"-ERR Protocol error: too many arguments\r\n"},
		{"InlineWithTooManyArguments", []byte(strings.Repeat("a ", 1025) + "\r\n"), nil,
			"-ERR Protocol error: too many arguments\r\n"},
		{"CommandTooLarge", []byte("*5\r\n" + strings.Repeat("$1048576\r\n"+strings.Repeat("x", 1<<20)+"\r\n", 4)), nil,
			"-ERR Protocol error: command too large\r\n"},
		{"UnbalancedQuotes", []byte("ECHO \"abc\r\n"), nil,
			"-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"ValidCommandsBeforeTheViolationAreAnswered", []byte("PING\r\n*1\r\n$4\r\nPING\r\n*-1\r\n"), nil,
			"+PONG\r\n+PONG\r\n-ERR Protocol error: invalid multibulk length\r\n"},
	}
	t.Run("EachAttack", func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				c := guardDial(t, srv.addr)
				go func() {
					if _, err := c.Write(tc.input); err != nil || tc.endless == nil {
						return
					}
					for {
						if _, err := c.Write(tc.endless); err != nil {
							return
						}
					}
				}()
				got := guardReadToClose(t, c)
				if tc.want != "" && got != tc.want {
					t.Fatalf("got %q, want %q", guardTail(got), tc.want)
				}
				lines := strings.SplitAfter(got, "\r\n")
				if last := lines[len(lines)-1]; last != "" {
					t.Fatalf("reply ends in a partial line %q", last)
				}
				if last := lines[max(0, len(lines)-2)]; !strings.HasPrefix(last, "-ERR Protocol error: ") {
					t.Fatalf("last reply %q is not a protocol error", last)
				}
			})
		}
	})

	close(stopPing)
	if err := <-pingDone; err != nil {
		t.Fatalf("the other client stopped getting PONG: %v", err)
	}
	if pongs == 0 {
		t.Fatal("the other client got no PONG")
	}
}

func TestGuardKeepsHeapBoundedUnderGigabyteBulkHeader(t *testing.T) {
	t.Parallel()
	srv := guardStartServer(t, Limits{}, nil)
	before := guardHeapInuse()

	c := guardDial(t, srv.addr)
	go func() {
		c.Write([]byte("*1\r\n$1073741824\r\n"))
		chunk := make([]byte, 1<<20)
		for range 256 {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	if got, want := guardReadToClose(t, c), "-ERR Protocol error: bulk length exceeds limit\r\n"; got != want {
		t.Fatalf("got %q, want %q", guardTail(got), want)
	}

	if grew := int64(guardHeapInuse()) - int64(before); grew > 64<<20 {
		t.Fatalf("heap grew by %d MiB", grew>>20)
	}
}

func guardHeapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// guardValidTraffic must pass through the guard unchanged.
var guardValidTraffic = map[string]string{
	"PipelinedCommands": "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n",
	"InlineCommandsWithQuotes": "PING\r\nECHO \"a \\\"quoted\\\" word\" 'single'\r\nPING\n\r\n\n" +
		"ECHO \"x\\r\\n\" plain\r\n",
	"BinaryBulkBodiesContainingCRLF": "*2\r\n$4\r\nECHO\r\n$8\r\n\r\n\x00\xff*1\r\n\r\n" +
		"*2\r\n$4\r\nECHO\r\n$3\r\n$\r\n\r\n",
	"BulkLargerThanOneRead":   "*2\r\n$4\r\nECHO\r\n$70000\r\n" + strings.Repeat("0123456789", 7000) + "\r\nPING\r\n",
	"MixedInlineAndMultibulk": "PING\r\n*1\r\n$4\r\nPING\r\nPING\r\n",
}

// guardPipe writes input into a GuardedConn in writes of chunk bytes (all at
// once when 0), reads it back through p-sized reads and returns what Read
// handed out and the error that ended it.
func guardPipe(t testing.TB, lim Limits, input []byte, chunks func() int, readSize int) ([]byte, error) {
	client, server := net.Pipe()
	gc := NewGuardedConn(server, lim)
	defer gc.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // drain the protocol error the guard may write
		defer wg.Done()
		io.Copy(io.Discard, client)
	}()
	go func() {
		defer wg.Done()
		defer client.Close()
		for rest := input; len(rest) > 0; {
			n := min(chunks(), len(rest))
			if _, err := client.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
	}()
	var got []byte
	p := make([]byte, readSize)
	var err error
	for {
		var n int
		n, err = gc.Read(p)
		if n > 0 && err != nil {
			t.Fatalf("Read returned %d bytes and %v", n, err)
		}
		if n == 0 && err == nil {
			t.Fatal("Read returned nothing and no error")
		}
		if err != nil {
			break
		}
		got = append(got, p[:n]...)
	}
	gc.Close()
	wg.Wait()
	return got, err
}

func TestGuardPassesValidTraffic(t *testing.T) {
	t.Parallel()
	for name, input := range guardValidTraffic {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, sizes := range [][2]int{{len(input), 1 << 20}, {len(input), 1}, {len(input), 5}, {1, 4096}, {3, 5}, {7, 1 << 20}} {
				chunk, readSize := sizes[0], sizes[1]
				got, err := guardPipe(t, Limits{}, []byte(input), func() int { return chunk }, readSize)
				if err != io.EOF {
					t.Fatalf("writes of %d, reads of %d: %v", chunk, readSize, err)
				}
				if string(got) != input {
					t.Fatalf("writes of %d, reads of %d: got %q", chunk, readSize, guardTail(string(got)))
				}
			}
		})
	}
}

func TestGuardServesCommandsSentOneBytePerWrite(t *testing.T) {
	t.Parallel()
	srv := guardStartServer(t, Limits{}, nil)
	c := guardDial(t, srv.addr)
	c.(*net.TCPConn).SetNoDelay(true)
	input := "*2\r\n$4\r\nECHO\r\n$6\r\na\r\nb\r\n\r\n" + "ECHO \"two words\"\r\n" + "*1\r\n$4\r\nPING\r\n"
	go func() {
		for i := range len(input) {
			if _, err := c.Write([]byte{input[i]}); err != nil {
				return
			}
		}
	}()
	guardExpect(t, c, "$6\r\na\r\nb\r\n\r\n$9\r\ntwo words\r\n+PONG\r\n")
}

// redcon v1.6.2 doubles its read buffer whenever a read leaves it full in
// the middle of a command, so a client whose writes never end on a command
// boundary could grow it without bound with valid commands alone.
func TestGuardKeepsRedconBufferSmallUnderPipelining(t *testing.T) {
	t.Parallel()
	const ping = "*1\r\n$4\r\nPING\r\n"
	const total = 1 << 20 // commands
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	go func() {
		buf := make([]byte, 4000)
		for off := 0; off < total*len(ping); {
			n := len(buf)
			if (off+n)%len(ping) == 0 {
				n-- // never end a write on a command boundary
			}
			for i := range n {
				buf[i] = ping[(off+i)%len(ping)]
			}
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
			off += n
		}
	}()

	rd := redcon.NewReader(NewGuardedConn(server, Limits{}))
	for got := 0; got < total; {
		cmds, err := rd.ReadCommands()
		if err != nil {
			t.Fatal(err)
		}
		got += len(cmds)
	}
	// Reader.buf is redcon's internal buffer; reflect may read its size.
	if size := reflect.ValueOf(rd).Elem().FieldByName("buf").Cap(); size > 1<<20 {
		t.Fatalf("redcon's buffer grew to %d KiB", size>>10)
	}
}

func TestGuardIdleTimeout(t *testing.T) {
	t.Parallel()
	const idle = 200 * time.Millisecond
	srv := guardStartServer(t, Limits{}, func(conn redcon.Conn) bool {
		conn.NetConn().(*GuardedConn).SetIdleTimeout(idle)
		return true
	})

	t.Run("IdleClientIsDropped", func(t *testing.T) {
		t.Parallel()
		c := guardDial(t, srv.addr)
		start := time.Now()
		if got := guardReadToClose(t, c); got != "" {
			t.Fatalf("got %q", got)
		}
		if waited := time.Since(start); waited < idle/2 {
			t.Fatalf("dropped after %v", waited)
		}
	})
	t.Run("ActiveClientStays", func(t *testing.T) {
		t.Parallel()
		c := guardDial(t, srv.addr)
		for range 8 {
			time.Sleep(idle / 2)
			c.Write([]byte("PING\r\n"))
			guardExpect(t, c, "+PONG\r\n")
		}
	})
	t.Run("ZeroTimeoutKeepsIdleClient", func(t *testing.T) {
		t.Parallel()
		c := guardDial(t, srv.addr)
		c.Write([]byte("AUTH\r\n"))
		guardExpect(t, c, "+OK\r\n")
		time.Sleep(3 * idle) // nothing to poll for: the point is to stay idle
		c.Write([]byte("PING\r\n"))
		guardExpect(t, c, "+PONG\r\n")
	})
}
