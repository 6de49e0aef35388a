package commands_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
)

// rawClient is a TCP connection that speaks RESP by hand, authenticated.
func rawClient(t *testing.T, a *agqtest.Agq) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", a.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	rd := bufio.NewReader(c)
	fmt.Fprintf(c, "*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(a.AdminKey), a.AdminKey)
	if line, err := rd.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("AUTH: %q, %v", line, err)
	}
	return c, rd
}

func vmRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// One authenticated client cannot make agq hold gigabytes: a command is at
// most what a batch of jobs needs, and all clients' unfinished commands
// share one budget; a client past it gets an error and is closed, while
// the others are served.
func TestInputIsBounded(t *testing.T) {
	t.Run("HugeCommandsAreRefusedBeforeTheirBodies", func(t *testing.T) {
		a := agqtest.Start(t)
		before := vmRSS(t)
		for range 2 {
			c, rd := rawClient(t, a)
			go func() {
				// A 250 MiB command of four 62.5 MiB arguments, streamed
				// as a client would.
				const arg = 250 << 20 / 4
				fmt.Fprintf(c, "*6\r\n$5\r\nLPUSH\r\n$7\r\nqueue:x\r\n")
				chunk := make([]byte, 1<<20)
				for range 4 {
					fmt.Fprintf(c, "$%d\r\n", arg)
					for sent := 0; sent < arg; sent += len(chunk) {
						if _, err := c.Write(chunk[:min(len(chunk), arg-sent)]); err != nil {
							return
						}
					}
					c.Write([]byte("\r\n"))
				}
			}()
			line, _ := rd.ReadString('\n')
			if !strings.HasPrefix(line, "-ERR Protocol error: bulk length exceeds limit") {
				t.Fatalf("a 250 MiB command: %q", line)
			}
		}
		if grown := vmRSS(t) - before; grown > 64<<20 {
			t.Fatalf("RSS grew by %d MiB", grown>>20)
		}
		if err := a.Admin(t).Ping(context.Background()).Err(); err != nil {
			t.Fatalf("others are not served: %v", err)
		}
	})

	t.Run("LargeCommandsShareOneBudget", func(t *testing.T) {
		cfg := agqtest.DefaultConfig(t)
		cfg.MaxInputBuffer = 20 << 20
		a := agqtest.StartConfig(t, cfg)
		echo := func(c net.Conn, rd *bufio.Reader, size int, send bool) (string, error) {
			fmt.Fprintf(c, "*2\r\n$4\r\nECHO\r\n$%d\r\n", size)
			if send {
				c.Write(append(make([]byte, size), '\r', '\n'))
			}
			return rd.ReadString('\n')
		}
		const spent = "-ERR Protocol error: server input buffers are full; retry later\r\n"
		// A's 5 MiB argument, half sent, holds twice its size beyond the
		// free MiB: 8 MiB of the 20.
		first, firstRd := rawClient(t, a)
		fmt.Fprintf(first, "*2\r\n$4\r\nECHO\r\n$%d\r\n", 5<<20)
		first.Write(make([]byte, 1<<20))
		time.Sleep(200 * time.Millisecond)
		// B's 8 MiB argument needs 14 MiB: it does not fit, B is closed.
		second, secondRd := rawClient(t, a)
		if line, _ := echo(second, secondRd, 8<<20, false); line != spent {
			t.Fatalf("a command past the budget: %q", line)
		}
		if _, err := secondRd.ReadString('\n'); err == nil {
			t.Fatal("the connection past the budget stayed open")
		}
		if err := a.Admin(t).Ping(context.Background()).Err(); err != nil {
			t.Fatalf("others are not served: %v", err)
		}
		// A's command runs. Its connection keeps what it took as long as
		// it is open (the reader keeps its grown buffer), so an 8 MiB
		// command still does not fit…
		first.Write(append(make([]byte, 4<<20), '\r', '\n'))
		if line, err := firstRd.ReadString('\n'); err != nil || line != fmt.Sprintf("$%d\r\n", 5<<20) {
			t.Fatalf("the command within the budget: %q, %v", line, err)
		}
		third, thirdRd := rawClient(t, a)
		if line, _ := echo(third, thirdRd, 8<<20, false); line != spent {
			t.Fatalf("an 8 MiB command while A is connected: %q", line)
		}
		// …until A closes.
		first.Close()
		time.Sleep(200 * time.Millisecond)
		fourth, fourthRd := rawClient(t, a)
		if line, err := echo(fourth, fourthRd, 8<<20, true); err != nil || line != fmt.Sprintf("$%d\r\n", 8<<20) {
			t.Fatalf("a command once A closed: %q, %v", line, err)
		}
	})
}
