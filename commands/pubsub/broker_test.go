package pubsub

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/tidwall/redcon"

	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// detached serves one connection with resp.Serve and detaches it at its
// first command: the test holds the client's end and the server's.
func detached(t *testing.T) (client net.Conn, server redcon.DetachedConn, serverNet net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	type pair struct {
		dc redcon.DetachedConn
		nc net.Conn
	}
	got := make(chan pair, 1)
	go resp.Serve(ln, func(c redcon.Conn, _ redcon.Command) {
		got <- pair{c.Detach(), c.NetConn()}
	}, nil, nil)
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	if _, err := client.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		return client, p.dc, p.nc
	case <-time.After(5 * time.Second):
		t.Fatal("the connection was not served")
	}
	return nil, nil, nil
}

// readExactly reads len(want) bytes from c and compares them with want.
func readExactly(t *testing.T, c net.Conn, r *bufio.Reader, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatalf("reading %q: %v (got %q)", want, err, buf)
	}
	if string(buf) != want {
		t.Fatalf("read %q, want %q", buf, want)
	}
}

func newTestBroker() (*Broker, *wakeup.Hub, prometheus.Counter) {
	hub := wakeup.New(wakeup.Config{})
	slow := prometheus.NewCounter(prometheus.CounterOpts{Name: "slow"})
	return NewBroker(hub, slow), hub, slow
}

func resp2() int { return 2 }

func TestBrokerDeliversToChannelsAndPatternsAndReportsInterest(t *testing.T) {
	t.Parallel()
	b, hub, _ := newTestBroker()
	client, conn, nc := detached(t)
	r := bufio.NewReader(client)
	sub := b.NewSubscriber(conn, nc, resp2, zerolog.Nop(), records.DefaultNamespace)
	defer sub.Close()

	b.Subscribe(sub, []string{"job.cancel"}, false)
	sub.Start()
	readExactly(t, client, r, "*3\r\n$9\r\nsubscribe\r\n$10\r\njob.cancel\r\n:1\r\n")
	if !hub.Wanted() || hub.WantedStatus() {
		t.Fatalf("job.cancel alone: wanted %v, status wanted %v; want true, false", hub.Wanted(), hub.WantedStatus())
	}

	sub.Exclusive(func() { b.Subscribe(sub, []string{"job.*"}, true) })
	readExactly(t, client, r, "*3\r\n$10\r\npsubscribe\r\n$5\r\njob.*\r\n:2\r\n")
	if !hub.WantedStatus() {
		t.Fatal("a glob pattern must make jobs' status wanted")
	}
	if n := b.Receivers(records.DefaultNamespace, "job.cancel"); n != 2 {
		t.Fatalf("Receivers(job.cancel) = %d, want 2", n)
	}

	b.Deliver(wakeup.Message{Channel: "job.cancel", Payload: "j1"})
	readExactly(t, client, r, "*3\r\n$7\r\nmessage\r\n$10\r\njob.cancel\r\n$2\r\nj1\r\n"+
		"*4\r\n$8\r\npmessage\r\n$5\r\njob.*\r\n$10\r\njob.cancel\r\n$2\r\nj1\r\n")

	sub.Exclusive(func() { b.Unsubscribe(sub, nil, true) })
	readExactly(t, client, r, "*3\r\n$12\r\npunsubscribe\r\n$5\r\njob.*\r\n:1\r\n")
	sub.Exclusive(func() { b.Unsubscribe(sub, nil, false) })
	readExactly(t, client, r, "*3\r\n$11\r\nunsubscribe\r\n$10\r\njob.cancel\r\n:0\r\n")
	if hub.Wanted() || b.Receivers(records.DefaultNamespace, "job.cancel") != 0 || sub.Count() != 0 {
		t.Fatalf("with nothing subscribed: wanted %v, receivers %d, count %d", hub.Wanted(), b.Receivers(records.DefaultNamespace, "job.cancel"), sub.Count())
	}
}

func TestSubscriberThatDoesNotReadIsCutOff(t *testing.T) {
	t.Parallel()
	b, hub, slow := newTestBroker()
	client, conn, nc := detached(t)
	r := bufio.NewReader(client)
	sub := b.NewSubscriber(conn, nc, resp2, zerolog.Nop(), records.DefaultNamespace)
	// Not started: nothing takes the messages out of its queue.
	b.Subscribe(sub, []string{"job.j1.status"}, false)
	for range queueSize + 2 {
		b.Deliver(wakeup.Message{Channel: "job.j1.status", Payload: "{}"})
	}
	readExactly(t, client, r, "*3\r\n$9\r\nsubscribe\r\n$13\r\njob.j1.status\r\n:1\r\n"+
		"-ERR subscriber too slow: 4096 messages unread; disconnected\r\n")
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("after the cut-off read %v, want EOF", err)
	}
	var m dto.Metric
	if err := slow.Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Fatalf("slow subscribers counted %v (%v), want 1", m.GetCounter().GetValue(), err)
	}
	sub.Close()
	if hub.Wanted() {
		t.Fatal("a closed subscriber still makes messages wanted")
	}
}

func TestEncodings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, got, want string
	}{
		{"message RESP2", string(messageRESP(wakeup.Message{Channel: "c", Payload: "p"}, 2)), "*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\np\r\n"},
		{"message RESP3", string(messageRESP(wakeup.Message{Channel: "c", Payload: "p"}, 3)), ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\np\r\n"},
		{"pmessage RESP3", string(messageRESP(wakeup.Message{Channel: "c", Payload: "p", Pattern: "*"}, 3)), ">4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$1\r\nc\r\n$1\r\np\r\n"},
		{"pong", string(Pong("hi")), "*2\r\n$4\r\npong\r\n$2\r\nhi\r\n"},
		{"unsubscribed, none named, RESP2", string(Unsubscribed(2, nil, false)), "*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n"},
		{"unsubscribed, none named, RESP3", string(Unsubscribed(3, nil, true)), ">3\r\n$12\r\npunsubscribe\r\n_\r\n:0\r\n"},
		{"unsubscribed, named", string(Unsubscribed(2, []string{"a", "b"}, false)),
			"*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:0\r\n*3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:0\r\n"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

// The glob is Redis's: PSUBSCRIBE's patterns match as KEYS's do.
func TestPatternsMatchWithRedisGlob(t *testing.T) {
	t.Parallel()
	b, _, _ := newTestBroker()
	_, conn, nc := detached(t)
	sub := b.NewSubscriber(conn, nc, resp2, zerolog.Nop(), records.DefaultNamespace)
	defer sub.Close()
	b.Subscribe(sub, []string{"queue.[ab].events", `job.\*`}, true)
	for channel, want := range map[string]int{"queue.a.events": 1, "queue.c.events": 0, "job.*": 1, "job.x": 0} {
		if n := b.Receivers(records.DefaultNamespace, channel); n != want {
			t.Errorf("Receivers(%q) = %d, want %d", channel, n, want)
		}
	}
}

// A subscriber hears its own namespace's messages only, by channel and by
// pattern; a message naming no namespace is the default one's.
func TestSubscribersHearTheirNamespaceOnly(t *testing.T) {
	t.Parallel()
	b, _, _ := newTestBroker()
	clientA, connA, ncA := detached(t)
	clientB, connB, ncB := detached(t)
	rA, rB := bufio.NewReader(clientA), bufio.NewReader(clientB)
	subA := b.NewSubscriber(connA, ncA, resp2, zerolog.Nop(), "a")
	defer subA.Close()
	subB := b.NewSubscriber(connB, ncB, resp2, zerolog.Nop(), "b")
	defer subB.Close()
	for _, sub := range []*Subscriber{subA, subB} {
		b.Subscribe(sub, []string{"job.j1.status"}, false)
		b.Subscribe(sub, []string{"job.*"}, true)
		sub.Start()
	}
	subscribed := "*3\r\n$9\r\nsubscribe\r\n$13\r\njob.j1.status\r\n:1\r\n*3\r\n$10\r\npsubscribe\r\n$5\r\njob.*\r\n:2\r\n"
	readExactly(t, clientA, rA, subscribed)
	readExactly(t, clientB, rB, subscribed)

	if n := b.Receivers("a", "job.j1.status"); n != 2 {
		t.Fatalf("Receivers(a, job.j1.status) = %d, want 2", n)
	}
	if n := b.Receivers(records.DefaultNamespace, "job.j1.status"); n != 0 {
		t.Fatalf("Receivers(default, job.j1.status) = %d, want 0", n)
	}
	b.Deliver(wakeup.Message{Namespace: "b", Channel: "job.j1.status", Payload: "from-b"})
	b.Deliver(wakeup.Message{Channel: "job.j1.status", Payload: "from-default"})
	b.Deliver(wakeup.Message{Namespace: "a", Channel: "job.j1.status", Payload: "from-a"})
	fromA := "*3\r\n$7\r\nmessage\r\n$13\r\njob.j1.status\r\n$6\r\nfrom-a\r\n" +
		"*4\r\n$8\r\npmessage\r\n$5\r\njob.*\r\n$13\r\njob.j1.status\r\n$6\r\nfrom-a\r\n"
	// A's first messages are A's: neither B's nor the default one's came before.
	readExactly(t, clientA, rA, fromA)
	fromB := "*3\r\n$7\r\nmessage\r\n$13\r\njob.j1.status\r\n$6\r\nfrom-b\r\n" +
		"*4\r\n$8\r\npmessage\r\n$5\r\njob.*\r\n$13\r\njob.j1.status\r\n$6\r\nfrom-b\r\n"
	readExactly(t, clientB, rB, fromB)
	b.Deliver(wakeup.Message{Namespace: "b", Channel: "job.j2.status", Payload: "end"})
	// B hears its pattern's message next: nothing of A's came between.
	readExactly(t, clientB, rB, "*4\r\n$8\r\npmessage\r\n$5\r\njob.*\r\n$13\r\njob.j2.status\r\n$3\r\nend\r\n")
}

// A subscriber moves to another namespace only with nothing subscribed.
func TestSubscriberMovesOnlyWhenEmpty(t *testing.T) {
	t.Parallel()
	b, _, _ := newTestBroker()
	_, conn, nc := detached(t)
	sub := b.NewSubscriber(conn, nc, resp2, zerolog.Nop(), "a")
	defer sub.Close()
	b.Subscribe(sub, []string{"job.cancel"}, false)
	if sub.MoveTo("b") {
		t.Fatal("a subscriber holding a's channels moved to b")
	}
	b.Unsubscribe(sub, nil, false)
	if !sub.MoveTo("b") {
		t.Fatal("a subscriber holding nothing did not move to b")
	}
	b.Subscribe(sub, []string{"job.cancel"}, false)
	if b.Receivers("b", "job.cancel") != 1 || b.Receivers("a", "job.cancel") != 0 {
		t.Fatalf("receivers in b %d, in a %d; want 1, 0", b.Receivers("b", "job.cancel"), b.Receivers("a", "job.cancel"))
	}
}
