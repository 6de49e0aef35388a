package commands_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

// attack is one hostile client: it sends head, then, when stream is set,
// keeps sending stream until the server hangs up or the deadline passes.
type attack struct {
	name   string
	head   []byte
	stream []byte
	// strict attacks send nothing after the offending header, so the server
	// can always tell them why before it hangs up.
	strict bool
}

func attacks() []attack {
	garbage := make([]byte, 1<<20)
	rng := rand.NewChaCha8([32]byte{'a', 'g', 'q'})
	_, _ = rng.Read(garbage)
	return []attack{
		{name: "BulkLengthNearMaxInt64", head: []byte("*1\r\n$9223372036854775807\r\n"), strict: true},
		{name: "ArgumentCountInTheQuintillions", head: []byte("*9000000000000000000\r\n"), strict: true},
		{name: "OneGiBBulkStreamingZeros", head: []byte("*1\r\n$1073741824\r\n"), stream: make([]byte, 64<<10)},
		{name: "OneMiBOfRandomGarbage", head: garbage},
		{name: "InlineLineThatNeverEnds", head: []byte("PING "), stream: bytes.Repeat([]byte("a"), 64<<10)},
	}
}

// outcome is what the server did to an attack.
type outcome struct {
	reply  string // what it answered, up to the first few KiB
	closed bool   // it closed the connection
}

// run performs the attack and waits, until deadline, for the server to
// answer an error or close the connection.
func (at attack) run(addr string, deadline time.Time) (outcome, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return outcome{}, err
	}
	defer conn.Close()
	conn.SetDeadline(deadline)

	var (
		mu     sync.Mutex
		got    []byte
		closed = make(chan struct{})
		sawErr = make(chan struct{})
	)
	go func() {
		defer close(closed)
		var once sync.Once
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			mu.Lock()
			if len(got) < 4096 {
				got = append(got, buf[:n]...)
			}
			if bytes.Contains(got, []byte("-ERR")) {
				once.Do(func() { close(sawErr) })
			}
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		if _, err := conn.Write(at.head); err != nil {
			return
		}
		for at.stream != nil {
			if _, err := conn.Write(at.stream); err != nil {
				return // the server hung up (or the deadline passed)
			}
		}
	}()

	var o outcome
	if at.strict {
		<-closed // the error line, then the end of the connection
	} else {
		select {
		case <-closed:
		case <-sawErr:
		}
	}
	select {
	case <-closed:
		o.closed = true
	default:
	}
	mu.Lock()
	o.reply = string(got)
	mu.Unlock()
	if time.Now().After(deadline) {
		return o, fmt.Errorf("no error reply and no close before the deadline; got %q", o.reply)
	}
	return o, nil
}

func (o outcome) check(at attack) error {
	if at.strict {
		if !strings.HasPrefix(o.reply, "-ERR Protocol error") || !strings.HasSuffix(o.reply, "\r\n") || !o.closed {
			return fmt.Errorf("reply %q, closed %v; want one -ERR Protocol error line, then the connection closed", o.reply, o.closed)
		}
		return nil
	}
	if !o.closed && !strings.Contains(o.reply, "-ERR") {
		return fmt.Errorf("reply %q and the connection is open", o.reply)
	}
	return nil
}

// heapPeak samples the heap in use until stop is closed and reports its peak.
func heapPeak(stop <-chan struct{}) <-chan uint64 {
	peak := make(chan uint64, 1)
	go func() {
		var max uint64
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > max {
				max = ms.HeapInuse
			}
			select {
			case <-stop:
				peak <- max
				return
			case <-tick.C:
			}
		}
	}()
	return peak
}

// TestAbsurdInputIsRefusedCheaply does not run in parallel: it measures the
// heap of the whole test process.
func TestAbsurdInputIsRefusedCheaply(t *testing.T) {
	a := agqtest.Start(t)
	ctx := ctxT(t)
	c := a.Client(t, redis.Options{Password: a.AdminKey, MaxRetries: -1, ReadTimeout: 2 * time.Second})
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	// An honest client keeps being served throughout.
	stopPing := make(chan struct{})
	var pings atomic.Int64
	pingErr := make(chan error, 1)
	var pinging sync.WaitGroup
	pinging.Add(1)
	go func() {
		defer pinging.Done()
		for {
			select {
			case <-stopPing:
				return
			default:
			}
			if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
				select {
				case pingErr <- fmt.Errorf("PING = %q, %v after %d good ones", got, err, pings.Load()):
				default:
				}
				continue
			}
			pings.Add(1)
		}
	}()

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stopHeap := make(chan struct{})
	peak := heapPeak(stopHeap)

	for _, at := range attacks() {
		t.Run(at.name, func(t *testing.T) {
			o, err := at.run(a.Addr, time.Now().Add(20*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := o.check(at); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("AllAtOnceManyTimes", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for range 4 {
			for _, at := range attacks() {
				wg.Add(1)
				go func() {
					defer wg.Done()
					o, err := at.run(a.Addr, time.Now().Add(30*time.Second))
					if err == nil {
						err = o.check(at)
					}
					if err != nil {
						errs <- fmt.Errorf("%s: %w", at.name, err)
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	close(stopHeap)
	grown := int64(<-peak) - int64(before.HeapInuse)
	close(stopPing)
	pinging.Wait()
	select {
	case err := <-pingErr:
		t.Fatalf("the honest client was not served: %v", err)
	default:
	}
	if pings.Load() < 100 {
		t.Fatalf("only %d PINGs answered while under attack", pings.Load())
	}
	t.Logf("heap in use grew by at most %d KiB; %d PINGs answered", grown>>10, pings.Load())
	if grown > 64<<20 {
		t.Fatalf("heap in use grew by %d MiB while refusing bad input", grown>>20)
	}
	if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING after the attacks = %q, %v", got, err)
	}
}

func TestBadArgumentsAnswerErrorsAndServingGoesOn(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	// One connection throughout: an error must not end it.
	c := a.Client(t, redis.Options{Password: a.AdminKey, PoolSize: 1, MaxRetries: -1})

	tests := []struct {
		args []any
		want string
	}{
		{[]any{"KEY.CREATE", "worker"}, "ERR wrong number of arguments for 'key.create' command"},
		{[]any{"KEY.LIST", "extra"}, "ERR wrong number of arguments for 'key.list' command"},
		{[]any{"key.revoke"}, "ERR wrong number of arguments for 'key.revoke' command"},
		{[]any{"TIME", "now"}, "ERR wrong number of arguments for 'time' command"},
		{[]any{"PING", "a", "b"}, "ERR wrong number of arguments for 'ping' command"},
		{[]any{"AUTH", "a", "b", "c"}, "ERR syntax error"},
		{[]any{"SELECT", "zero"}, "ERR value is not an integer or out of range"},
		{[]any{"HELLO", "three"}, "ERR Protocol version is not an integer or out of range"},
		{[]any{"HELLO", "3", "SETNAME"}, "ERR Syntax error in HELLO option 'SETNAME'"},
		{[]any{"CLIENT", "SETNAME"}, "ERR wrong number of arguments for 'client|setname' command"},
		{[]any{"CLIENT", "SETINFO", "LIB-COLOUR", "blue"}, "ERR Unrecognized option 'LIB-COLOUR'"},
		{[]any{"COMMAND", "NOPE"}, "ERR unknown subcommand 'NOPE'. Try COMMAND HELP."},
		{[]any{"KEY.CREATE", "worker", "\xff\xfe"}, "ERR principal names are 1-64 characters of letters, digits, '_', '-', '.', '@'"},
		{[]any{"KEY.CREATE", "worker", strings.Repeat("w", 65)}, "ERR principal names are 1-64 characters of letters, digits, '_', '-', '.', '@'"},
		{[]any{"KEY.CREATE", "worker", "default"}, "ERR principal names are 1-64 characters of letters, digits, '_', '-', '.', '@'"},
		// Bad JSON is the handler's to refuse; the wording is its own.
		{[]any{"JOB.SUBMIT", `{"type":`}, "ERR *"},
		{[]any{"JOB.SUBMIT", `{"type":"x","no_such_field":1}`}, "ERR *"},
		{[]any{"JOB.SUBMIT", "\xff\xfe"}, "ERR *"},
		{[]any{"WORKER.REGISTER", "{bad"}, "ERR *"},
		{[]any{"WORKER.REGISTER", "[]"}, "ERR *"},
		// Text PostgreSQL cannot store, and values of the wrong type, are
		// named in the sender's terms.
		{[]any{"WORKER.REGISTER", `{"worker_id":"w","hostname":"h` + "\xff\xfe" + `","agw_version":"1","capabilities":{"tools":["x"]}}`},
			"ERR invalid registration: not valid UTF-8"},
		{[]any{"WORKER.HEARTBEAT", "w", `{"active_jobs":"` + "\xff" + `"}`}, "ERR invalid stats: not valid UTF-8"},
		{[]any{"WORKER.REGISTER", `{"worker_id":123,"hostname":"h","agw_version":"1","capabilities":{"tools":["x"]}}`},
			"ERR invalid worker_id"},
		{[]any{"WORKER.REGISTER", `{"worker_id":"w","hostname":"h","agw_version":"1","capabilities":{"tools":["x"]},"tags":[]}`},
			"ERR invalid registration: tags must be an object, not array"},
		{[]any{"WORKER.REGISTER", `{"worker_id":"w","hostname":"h","agw_version":"1","capabilities":{"tools":["x"]},"max_concurrent_jobs":"4"}`},
			"ERR invalid registration: max_concurrent_jobs must be a whole number, not string"},
		{[]any{"JOB.SUBMIT", `{"type":"x","priority":1e30}`}, "ERR invalid job: priority must be a whole number, not number 1e30"},
		{[]any{"JOB.SUBMIT", `{"type":"x","plan":{"tasks":"x"}}`},
			"ERR invalid job: plan must be an object whose tasks name their tool: tasks must be an array, not string"},
		{[]any{"JOB.UPDATE", "nosuch", `{"status":"failed","retryable":"false"}`},
			"ERR invalid update: retryable must be true or false, not string"},
		{[]any{"SCHEDULE.CREATE", `{"name":"s","cron":"@daily","max_catchup":"5","job":{"type":"x"}}`},
			"ERR invalid schedule: max_catchup must be a whole number, not string"},
		// Not UTF-8: the name may come back with replacement characters.
		{[]any{"\xc3\x28", "x"}, "ERR unknown command '*"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.args), func(t *testing.T) {
			got, err := c.Do(ctx, tc.args...).Text()
			if err != nil {
				got = err.Error()
			}
			if strings.Contains(got, "unknown command") && !strings.Contains(tc.want, "unknown command") {
				t.Fatalf("%q = %q: the command is not there to judge its arguments", tc.args, got)
			}
			if strings.Contains(got, "internal error") {
				t.Fatalf("%q = %q: bad input is the client's error, not an internal one", tc.args, got)
			}
			if prefix, ok := strings.CutSuffix(tc.want, "*"); ok && strings.HasPrefix(got, prefix) {
				got = tc.want
			}
			if got != tc.want {
				t.Fatalf("%q = %q, want %q", tc.args, got, tc.want)
			}
			if pong, err := c.Ping(ctx).Result(); err != nil || pong != "PONG" {
				t.Fatalf("PING after the error = %q, %v", pong, err)
			}
		})
	}
	t.Run("ManyArgumentsAreServed", func(t *testing.T) {
		// Within the guard's limits a long command is fine; the handler
		// then judges its arity.
		args := []any{"KEY.LIST"}
		for i := range 10000 {
			args = append(args, i)
		}
		err := c.Do(ctx, args...).Err()
		if err == nil || err.Error() != "ERR wrong number of arguments for 'key.list' command" {
			t.Fatalf("KEY.LIST with 10000 arguments: %v", err)
		}
	})
}

func TestConnectionCap(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, func(c *config.Config) {
		c.MaxClients = 5
		c.MaxUnauth = 5                 // all five may wait to authenticate
		c.AuthTimeout = 5 * time.Minute // and they must stay
	})
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		conn, err := net.Dial("tcp", a.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		return conn, bufio.NewReader(conn)
	}
	ping := func(conn net.Conn, rd *bufio.Reader) (string, error) {
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			return "", err
		}
		line, err := rd.ReadString('\n')
		return strings.TrimRight(line, "\r\n"), err
	}

	var conns []net.Conn
	for i := range 5 {
		conn, rd := dial()
		// A reply proves the server counted this connection.
		if got, err := ping(conn, rd); err != nil || got != "+PONG" {
			t.Fatalf("connection %d: PING = %q, %v", i+1, got, err)
		}
		conns = append(conns, conn)
	}

	t.Run("TheSixthIsTurnedAway", func(t *testing.T) {
		_, rd := dial()
		line, err := rd.ReadString('\n')
		if err != nil || line != "-ERR max number of clients reached\r\n" {
			t.Fatalf("sixth connection got %q, %v", line, err)
		}
		if _, err := rd.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("sixth connection stays open: %v", err)
		}
	})
	t.Run("AFreedSlotIsReused", func(t *testing.T) {
		conns[0].Close()
		agqtest.Eventually(t, 10*time.Second, func() error {
			conn, err := net.Dial("tcp", a.Addr)
			if err != nil {
				return err
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			got, err := ping(conn, bufio.NewReader(conn))
			if err != nil || got != "+PONG" {
				return fmt.Errorf("PING = %q, %v", got, err)
			}
			return nil
		})
	})
}

func TestUnauthenticatedClientsAreHeldToSmallLimits(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	for name, input := range map[string]string{
		"TooManyArguments": "*11\r\n" + strings.Repeat("$1\r\nx\r\n", 11),
		"ABigArgument":     "*2\r\n$4\r\nAUTH\r\n$20000\r\n" + strings.Repeat("k", 20000) + "\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", a.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			conn.Write([]byte(input))
			line, _ := bufio.NewReader(conn).ReadString('\n')
			if !strings.HasPrefix(line, "-ERR Protocol error: ") {
				t.Fatalf("reply %q", line)
			}
		})
	}
	// Once authenticated, the same connection may send a large job.
	c := a.Client(t, redis.Options{Password: a.AdminKey, PoolSize: 1})
	big := `{"type":"t","payload":"` + strings.Repeat("x", 100000) + `"}`
	if err := c.Do(ctxT(t), "JOB.SUBMIT", big).Err(); err != nil {
		t.Fatalf("a 100 kB job after AUTH: %v", err)
	}
}
