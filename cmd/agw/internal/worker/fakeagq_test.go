package worker

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAgq speaks just enough of agq's worker protocol, over real RESP2 on a
// loopback port, to drive a Worker through go-redis: AUTH, WORKER.*, BRPOP
// and JOB.UPDATE. It records every command. It is a stand-in for the
// server's side of the contract in BRIEF §5–6, not a model of its rules.
type fakeAgq struct {
	t    *testing.T
	ln   net.Listener
	jobs chan string // what BRPOP delivers, as "queue\x00json"

	mu         sync.Mutex
	conns      map[net.Conn]bool
	registered map[string]bool
	commands   [][]string
	changed    chan struct{} // closed and replaced on every command

	// Hooks; nil means the normal answer.
	authReply      func(user, pass string) string         // "+OK" or "-WRONGPASS …"
	registerReply  func(id string) string                 // "+OK worker_id=… heartbeat_interval=…"
	heartbeatReply func(id string) string                 // "+OK …"
	updateReply    func(jobID, body string, n int) string // n: how many updates the job had before
	updateDrop     func(jobID, body string, n int) bool   // close the connection instead of answering
	interval       string                                 // heartbeat_interval told to workers
}

func newFakeAgq(t *testing.T) *fakeAgq {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAgq{
		t: t, ln: ln, jobs: make(chan string, 16), conns: map[net.Conn]bool{},
		registered: map[string]bool{}, changed: make(chan struct{}), interval: "0.2",
	}
	go f.accept()
	t.Cleanup(func() {
		ln.Close()
		f.dropConnections()
	})
	return f
}

func (f *fakeAgq) addr() string { return f.ln.Addr().String() }

// push queues a job for BRPOP.
func (f *fakeAgq) push(queue, job string) { f.jobs <- queue + "\x00" + job }

func (f *fakeAgq) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns[c] = true
		f.mu.Unlock()
		go f.serve(c)
	}
}

// dropConnections closes every client connection, as a network blip or a
// server restart would.
func (f *fakeAgq) dropConnections() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.Close()
		delete(f.conns, c)
	}
}

// forget makes the fake no longer know any worker, as after the worker was
// declared dead.
func (f *fakeAgq) forget() {
	f.mu.Lock()
	f.registered = map[string]bool{}
	f.mu.Unlock()
}

func (f *fakeAgq) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	user := "default"
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		f.record(args)
		name := strings.ToUpper(args[0])
		var reply, delivered string
		switch name {
		case "HELLO":
			reply = "-ERR unknown command 'HELLO'" // go-redis falls back to AUTH over RESP2
		case "AUTH":
			pass := args[len(args)-1]
			if len(args) == 3 {
				user = args[1]
			}
			reply = "+OK"
			if f.authReply != nil {
				reply = f.authReply(user, pass)
			}
		case "CLIENT", "PING", "SELECT":
			reply = "+OK"
		case "WORKER.REGISTER":
			reply = fmt.Sprintf("+OK worker_id=%s heartbeat_interval=%s", user, f.interval)
			if f.registerReply != nil {
				reply = f.registerReply(user)
			}
			if strings.HasPrefix(reply, "+") {
				f.mu.Lock()
				f.registered[user] = true
				f.mu.Unlock()
			}
		case "WORKER.HEARTBEAT":
			reply = "+OK"
			switch {
			case !f.isRegistered(args[1]):
				reply = "-ERR Worker not registered: " + args[1]
			case f.heartbeatReply != nil:
				reply = f.heartbeatReply(args[1])
			}
		case "WORKER.UNREGISTER":
			f.mu.Lock()
			delete(f.registered, args[1])
			f.mu.Unlock()
			reply = "+OK"
		case "BRPOP":
			reply, delivered = f.brpop(args)
		case "JOB.UPDATE":
			n := len(f.updates(args[1])) - 1
			if f.updateDrop != nil && f.updateDrop(args[1], args[2], n) {
				return
			}
			reply = "+OK"
			if f.updateReply != nil {
				reply = f.updateReply(args[1], args[2], n)
			}
		default:
			reply = fmt.Sprintf("-ERR unknown command '%s'", args[0])
		}
		if _, err := io.WriteString(c, reply+"\r\n"); err != nil {
			if delivered != "" {
				f.jobs <- delivered // the client left while blocked: it never had the job
			}
			return
		}
	}
}

// brpop answers BRPOP, and returns the job it handed out, if any.
func (f *fakeAgq) brpop(args []string) (reply, delivered string) {
	timeout, err := strconv.ParseFloat(args[len(args)-1], 64)
	if err != nil {
		return "-ERR timeout is not a float or out of range", ""
	}
	select {
	case j := <-f.jobs:
		queue, job, _ := strings.Cut(j, "\x00")
		key := "queue:" + queue
		return fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$%d\r\n%s", len(key), key, len(job), job), j
	case <-time.After(time.Duration(timeout * float64(time.Second))):
		return "*-1", ""
	}
}

func (f *fakeAgq) isRegistered(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.registered[id]
}

func (f *fakeAgq) record(args []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commands = append(f.commands, args)
	close(f.changed)
	f.changed = make(chan struct{})
}

// calls returns the recorded commands named name (upper case).
func (f *fakeAgq) calls(name string) [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out [][]string
	for _, c := range f.commands {
		if strings.EqualFold(c[0], name) {
			out = append(out, c)
		}
	}
	return out
}

// updates returns the JOB.UPDATE bodies received for a job, in order.
func (f *fakeAgq) updates(jobID string) []string {
	var out []string
	for _, c := range f.calls("JOB.UPDATE") {
		if c[1] == jobID {
			out = append(out, c[2])
		}
	}
	return out
}

// waitFor polls cond, woken by every command, until it holds or the
// deadline passes.
func (f *fakeAgq) waitFor(what string, d time.Duration, cond func() bool) {
	f.t.Helper()
	deadline := time.After(d)
	for {
		f.mu.Lock()
		changed := f.changed
		f.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			f.t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}

// readCommand reads one RESP array of bulk strings, which is how go-redis
// sends every command.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 || n > 1024 {
		return nil, fmt.Errorf("bad array length %q", line)
	}
	args := make([]string, n)
	for i := range args {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || size < 0 || size > 64<<20 {
			return nil, fmt.Errorf("bad bulk length %q", line)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}
