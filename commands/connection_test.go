package commands_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestGoRedisConnects(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)

	t.Run("DefaultOptionsWithPassword", func(t *testing.T) {
		c := a.Client(t, redis.Options{Password: a.AdminKey})
		if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
			t.Fatalf("PING = %q, %v", got, err)
		}
		// The default handshake is HELLO 3: the connection speaks RESP3.
		info, err := c.ClientInfo(ctx).Result()
		if err != nil {
			t.Fatalf("CLIENT INFO: %v", err)
		}
		if info.Resp != 3 {
			t.Fatalf("resp = %d, want 3", info.Resp)
		}
	})
	t.Run("UsernameAndPassword", func(t *testing.T) {
		c := a.Client(t, redis.Options{Username: "admin", Password: a.AdminKey})
		if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
			t.Fatalf("PING = %q, %v", got, err)
		}
	})
	t.Run("ClientNameIsSet", func(t *testing.T) {
		c := a.Client(t, redis.Options{Password: a.AdminKey, ClientName: "reporter-7"})
		if got, err := c.ClientGetName(ctx).Result(); err != nil || got != "reporter-7" {
			t.Fatalf("CLIENT GETNAME = %q, %v", got, err)
		}
	})
	t.Run("RESP2WorksToo", func(t *testing.T) {
		c := a.Client(t, redis.Options{Password: a.AdminKey, Protocol: 2})
		if got, err := c.Echo(ctx, "héllo\r\nworld").Result(); err != nil || got != "héllo\r\nworld" {
			t.Fatalf("ECHO = %q, %v", got, err)
		}
	})
	t.Run("WrongKeyFailsWithWrongpass", func(t *testing.T) {
		c := a.Client(t, redis.Options{Password: strings.Repeat("ab", 32), MaxRetries: -1})
		err := c.Ping(ctx).Err()
		if err == nil || err.Error() != "WRONGPASS invalid username-password pair or user is disabled." {
			t.Fatalf("PING with a wrong key: %v", err)
		}
	})
	t.Run("AWorkerKeyLogsInUnderAWorkerID", func(t *testing.T) {
		key := a.CreateKey(t, "worker", "fleet")
		a.CreateKey(t, "producer", "someone")
		for _, user := range []string{"fleet", "fleet-7", "default", "someone"} {
			c := a.Client(t, redis.Options{Username: user, Password: key, MaxRetries: -1})
			if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
				t.Fatalf("PING as %s = %q, %v", user, got, err)
			}
		}
		// Another principal's name is not fleet's to register.
		c := a.Client(t, redis.Options{Username: "someone", Password: key, MaxRetries: -1})
		err := c.Do(ctx, "WORKER.REGISTER", `{"worker_id":"someone","hostname":"h","agw_version":"1","capabilities":{"tools":["x"]}}`).Err()
		if err == nil || err.Error() != "NOPERM Worker ID already registered by another principal" {
			t.Fatalf("registering another principal's name: %v", err)
		}
		c = a.Client(t, redis.Options{Username: "not a worker id", Password: key, MaxRetries: -1})
		if err := c.Ping(ctx).Err(); err == nil || err.Error() != "WRONGPASS invalid username-password pair or user is disabled." {
			t.Fatalf("PING as a name no worker may have, with fleet's key: %v", err)
		}
	})
	t.Run("WrongUserForAdminKeyFails", func(t *testing.T) {
		c := a.Client(t, redis.Options{Username: "someone-else", Password: a.AdminKey, MaxRetries: -1})
		if err := c.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
			t.Fatalf("PING: %v", err)
		}
	})
}

func TestCompatibilityCommands(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	c := a.Admin(t)

	tests := []struct {
		args []any
		want string
	}{
		{[]any{"PING"}, "PONG"},
		{[]any{"PING", "hi"}, "hi"},
		{[]any{"ECHO", "x"}, "x"},
		{[]any{"SELECT", "0"}, "OK"},
		{[]any{"SELECT", "1"}, "ERR DB index is out of range"},
		{[]any{"CLIENT", "SETNAME", "a b"}, "ERR Client names cannot contain spaces, newlines or special characters."},
		{[]any{"CLIENT", "SETINFO", "LIB-NAME", "mylib"}, "OK"},
		{[]any{"CLIENT", "NOPE"}, "ERR unknown subcommand 'NOPE'. Try CLIENT HELP."},
		{[]any{"NOSUCHCMD", "a", "b"}, "ERR unknown command 'NOSUCHCMD', with args beginning with: 'a' 'b' "},
		{[]any{"x", strings.Repeat("y", 200)}, "ERR unknown command 'x', with args beginning with: '" + strings.Repeat("y", 128) + "' "},
		{[]any{"ECHO"}, "ERR wrong number of arguments for 'echo' command"},
		{[]any{"HELLO", "4"}, "NOPROTO unsupported protocol version"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.args...), func(t *testing.T) {
			got, err := c.Do(ctx, tc.args...).Text()
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Fatalf("%v = %q, want %q", tc.args, got, tc.want)
			}
		})
	}
	t.Run("TimeIsNow", func(t *testing.T) {
		tm, err := c.Time(ctx).Result()
		if err != nil || time.Since(tm).Abs() > 5*time.Second {
			t.Fatalf("TIME = %v, %v", tm, err)
		}
	})
	t.Run("CommandCountMatchesCommandList", func(t *testing.T) {
		n, err := c.Do(ctx, "COMMAND", "COUNT").Int()
		if err != nil {
			t.Fatal(err)
		}
		names, err := c.Do(ctx, "COMMAND", "LIST").StringSlice()
		if err != nil || len(names) != n {
			t.Fatalf("COMMAND LIST has %d names (%v), COUNT says %d", len(names), err, n)
		}
		infos, err := c.Command(ctx).Result()
		if err != nil || infos["ping"] == nil || infos["ping"].Arity != -1 {
			t.Fatalf("COMMAND: %v %+v", err, infos["ping"])
		}
	})
	t.Run("InfoServerNamesTheVersion", func(t *testing.T) {
		info, err := c.Info(ctx, "server").Result()
		if err != nil || !strings.Contains(info, "# Server\r\n") || !strings.Contains(info, "agq_version:") {
			t.Fatalf("INFO server = %q, %v", info, err)
		}
	})
	t.Run("ClientListShowsThisConnection", func(t *testing.T) {
		id, err := c.ClientID(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		list, err := c.ClientList(ctx).Result()
		if err != nil || !strings.Contains(list, fmt.Sprintf("id=%d ", id)) {
			t.Fatalf("CLIENT LIST = %q, %v", list, err)
		}
	})
	t.Run("ClientListFilters", func(t *testing.T) {
		other := a.Client(t, redis.Options{Password: a.AdminKey, PoolSize: 1})
		otherID, err := other.ClientID(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		sub := other.Subscribe(ctx, "news")
		t.Cleanup(func() { sub.Close() })
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		count := func(args ...any) int {
			t.Helper()
			list, err := c.Do(ctx, append([]any{"CLIENT", "LIST"}, args...)...).Text()
			if err != nil {
				t.Fatalf("CLIENT LIST %v: %v", args, err)
			}
			return strings.Count(list, "\n")
		}
		all := count()
		if n := count("ID", otherID); n != 1 {
			t.Fatalf("CLIENT LIST ID %d: %d lines", otherID, n)
		}
		if n := count("ID", 999999); n != 0 {
			t.Fatalf("CLIENT LIST ID 999999: %d lines", n)
		}
		if p, n := count("TYPE", "pubsub"), count("TYPE", "normal"); p != 1 || p+n != all {
			t.Fatalf("pubsub %d + normal %d, of %d", p, n, all)
		}
		if list, _ := c.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text(); !strings.Contains(list, " flags=P ") {
			t.Fatalf("a subscriber's line: %q", list)
		}
		// Unsubscribed from everything, the connection is a normal one again.
		if err := sub.Unsubscribe(ctx, "news"); err != nil {
			t.Fatal(err)
		}
		agqtest.Eventually(t, 5*time.Second, func() error {
			if p := count("TYPE", "pubsub"); p != 0 {
				return fmt.Errorf("%d subscribers listed after the unsubscribe", p)
			}
			return nil
		})
		for args, want := range map[string]string{"ID x": "ERR Invalid client ID", "TYPE bogus": "ERR Unknown client type 'bogus'", "bogus": "ERR syntax error"} {
			var cmd []any
			for _, f := range strings.Fields("CLIENT LIST " + args) {
				cmd = append(cmd, f)
			}
			if err := c.Do(ctx, cmd...).Err(); err == nil || err.Error() != want {
				t.Fatalf("CLIENT LIST %s: %v, want %s", args, err, want)
			}
		}
	})
	t.Run("HelpListsTheSubcommands", func(t *testing.T) {
		for _, cmd := range []string{"CLIENT", "COMMAND"} {
			lines, err := c.Do(ctx, cmd, "HELP").StringSlice()
			if err != nil || len(lines) < 3 || !strings.HasPrefix(lines[0], cmd+" <subcommand>") || lines[len(lines)-2] != "HELP" {
				t.Fatalf("%s HELP = %q, %v", cmd, lines, err)
			}
		}
	})
}

func TestRolesAndRevocation(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	workerKey := a.CreateKey(t, "worker", "worker-001")
	w := a.Client(t, redis.Options{Username: "worker-001", Password: workerKey})

	t.Run("WorkerCannotRunAdminCommands", func(t *testing.T) {
		err := w.Do(ctx, "KEY.LIST").Err()
		if err == nil || err.Error() != "NOPERM User worker-001 has no permissions to run the 'key.list' command" {
			t.Fatalf("KEY.LIST as worker: %v", err)
		}
	})
	t.Run("KeyListShowsMintedPrincipals", func(t *testing.T) {
		rows, err := a.Admin(t).Do(ctx, "KEY.LIST").Slice()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range rows {
			if row := r.([]any); row[0] == "worker-001" && row[1] == "worker" && row[2] == "minted" {
				found = true
			}
		}
		if !found {
			t.Fatalf("KEY.LIST = %v", rows)
		}
	})
	t.Run("RevokedKeyStopsWorking", func(t *testing.T) {
		if err := w.Echo(ctx, "x").Err(); err != nil {
			t.Fatalf("ECHO before revoke: %v", err)
		}
		if err := a.Admin(t).Do(ctx, "KEY.REVOKE", "worker-001").Err(); err != nil {
			t.Fatalf("KEY.REVOKE: %v", err)
		}
		// Revoking twice is harmless: clients re-send after timeouts.
		if err := a.Admin(t).Do(ctx, "KEY.REVOKE", "worker-001").Err(); err != nil {
			t.Fatalf("second KEY.REVOKE: %v", err)
		}
		// The open connection loses its authentication at once…
		if err := w.Echo(ctx, "x").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
			t.Fatalf("ECHO on the revoked connection: %v", err)
		}
		// …and a new one cannot authenticate.
		fresh := a.Client(t, redis.Options{Password: workerKey, MaxRetries: -1})
		if err := fresh.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
			t.Fatalf("PING with the revoked key: %v", err)
		}
	})
	t.Run("BadKeyCommandsAnswerErrors", func(t *testing.T) {
		for _, args := range [][]any{
			{"KEY.CREATE", "overlord", "x"},
			{"KEY.CREATE", "worker", "has space"},
			{"KEY.REVOKE", "never-existed"},
			{"KEY.REVOKE", "admin"}, // from configuration
		} {
			if err := a.Admin(t).Do(ctx, args...).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR ") {
				t.Errorf("%v: %v", args, err)
			}
		}
	})
}

func TestUnauthenticated(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t, func(c *config.Config) { c.AuthTimeout = 500 * time.Millisecond })
	conn, err := net.Dial("tcp", a.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	send := func(cmd string) string {
		t.Helper()
		if _, err := conn.Write([]byte(cmd)); err != nil {
			t.Fatal(err)
		}
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("reading reply to %q: %v", cmd, err)
		}
		return strings.TrimRight(line, "\r\n")
	}
	if got := send("PING\r\n"); got != "+PONG" {
		t.Fatalf("PING = %q", got)
	}
	if got := send("*1\r\n$4\r\nINFO\r\n"); got != "-NOAUTH Authentication required." {
		t.Fatalf("INFO before AUTH = %q", got)
	}
	if got := send("KEY.LIST\r\n"); got != "-NOAUTH Authentication required." {
		t.Fatalf("KEY.LIST before AUTH = %q", got)
	}
	// An idle unauthenticated connection is closed.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := rd.ReadByte(); err == nil {
		t.Fatal("idle unauthenticated connection was not closed")
	}
}

func TestRepeatedAuthFailuresCloseTheConnection(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	conn, err := net.Dial("tcp", a.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	rd := bufio.NewReader(conn)
	start := time.Now()
	closed := false
	for i := 0; i < 20 && !closed; i++ {
		if _, err := conn.Write([]byte("AUTH wrong\r\n")); err != nil {
			closed = true
			break
		}
		line, err := rd.ReadString('\n')
		if err != nil {
			closed = true
			break
		}
		if !strings.HasPrefix(line, "-WRONGPASS") {
			t.Fatalf("reply %d = %q", i, line)
		}
	}
	if !closed {
		t.Fatal("connection still open after 20 failed AUTHs")
	}
	if time.Since(start) < 500*time.Millisecond {
		t.Fatalf("failures were not slowed down: %v", time.Since(start))
	}
}

func TestRevocationMissedWhileNotListeningIsCaughtOnReconnect(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	key := a.CreateKey(t, "producer", "p1")
	c := a.Client(t, redis.Options{Username: "p1", Password: key, PoolSize: 1, MaxRetries: -1})
	if err := c.Echo(ctx, "x").Err(); err != nil {
		t.Fatal(err)
	}
	pool := a.Node.Store().Pool
	// The key is revoked behind agq's back (no notification), and every
	// connection agq has to the database is cut, LISTEN included.
	if _, err := pool.Exec(ctx, `UPDATE principals SET revoked_at = now() WHERE name = 'p1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	agqtest.Eventually(t, 15*time.Second, func() error {
		err := c.Echo(ctx, "x").Err()
		if err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
			return fmt.Errorf("ECHO on the revoked session: %v", err)
		}
		return nil
	})
}

func TestRevocationEndsABlockedPop(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	w := registerWorkerForRevocation(t, a)
	done := make(chan error, 1)
	go func() { done <- w.Do(ctx, "BRPOP", "queue:ready", "0").Err() }()
	agqtest.Eventually(t, 5*time.Second, func() error {
		if list, _ := a.Admin(t).ClientList(ctx).Result(); !strings.Contains(list, "cmd=brpop") {
			return fmt.Errorf("not blocked yet")
		}
		return nil
	})
	if err := a.Admin(t).Do(ctx, "KEY.REVOKE", "revoked-w").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
			t.Fatalf("the blocked pop ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a pop blocked forever outlived the revocation of its key")
	}
}

func registerWorkerForRevocation(t *testing.T, a *agqtest.Agq) *redis.Client {
	t.Helper()
	key := a.CreateKey(t, "worker", "revoked-w")
	c := a.Client(t, redis.Options{Username: "revoked-w", Password: key, PoolSize: 1, MaxRetries: -1, ReadTimeout: -1})
	doc := `{"worker_id":"revoked-w","hostname":"h","agw_version":"1","capabilities":{"tools":[]}}`
	if err := c.Do(ctxT(t), "WORKER.REGISTER", doc).Err(); err != nil {
		t.Fatal(err)
	}
	return c
}

// A blocking command sends the replies of the commands pipelined before it
// as soon as it waits, as Redis does: a worker that pipelines its report
// with its next pop reads the report's reply while the pop waits, and a
// script reading replies as they come is not held up by a JOB.WAIT.
func TestABlockedCommandFirstAnswersThosePipelinedBeforeIt(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	key := a.CreateKey(t, "worker", "pipe-w")
	conn, err := net.Dial("tcp", a.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	send := func(cmds ...[]string) {
		t.Helper()
		var b strings.Builder
		for _, args := range cmds {
			fmt.Fprintf(&b, "*%d\r\n", len(args))
			for _, a := range args {
				fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
			}
		}
		if _, err := conn.Write([]byte(b.String())); err != nil {
			t.Fatal(err)
		}
	}
	// line reads one line of a reply within d.
	line := func(d time.Duration) string {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(d))
		l, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("no reply within %v: %v", d, err)
		}
		return strings.TrimRight(l, "\r\n")
	}
	// job reads a BRPOP's reply: its job's id and delivery token.
	job := func(d time.Duration) (id, delivery string) {
		t.Helper()
		for range 4 { // *2, $n, the key, $n
			line(d)
		}
		var j struct {
			ID       string `json:"job_id"`
			Delivery string `json:"delivery"`
		}
		if err := json.Unmarshal([]byte(line(d)), &j); err != nil {
			t.Fatal(err)
		}
		return j.ID, j.Delivery
	}

	send([]string{"AUTH", "pipe-w", key},
		[]string{"WORKER.REGISTER", `{"worker_id":"pipe-w","hostname":"h","agw_version":"1","capabilities":{"tools":["t"]}}`})
	if got := line(5 * time.Second); got != "+OK" {
		t.Fatalf("AUTH: %q", got)
	}
	if got := line(5 * time.Second); !strings.HasPrefix(got, "+OK worker_id=pipe-w") {
		t.Fatalf("WORKER.REGISTER: %q", got)
	}
	first := submit(t, admin, map[string]any{"queue": "pipe", "type": "t"})
	send([]string{"BRPOP", "queue:pipe", "5"})
	id, delivery := job(5 * time.Second)
	if id != first {
		t.Fatalf("popped %s, want %s", id, first)
	}

	// The report and the next pop in one pipeline, with nothing to pop.
	send([]string{"JOB.UPDATE", id, `{"status":"completed","delivery":"` + delivery + `"}`},
		[]string{"BRPOP", "queue:pipe", "0"})
	if got := line(5 * time.Second); got != "+OK" {
		t.Fatalf("the report pipelined before a waiting pop: %q", got)
	}
	if v := getJob(t, admin, id); v.Status != "completed" {
		t.Fatalf("after its report: %+v", v)
	}
	second := submit(t, admin, map[string]any{"queue": "pipe", "type": "t"})
	if got, _ := job(5 * time.Second); got != second {
		t.Fatalf("the waiting pop got %s, want %s", got, second)
	}

	// A producer's JOB.WAIT behind a PING.
	p := a.CreateKey(t, "producer", "pipe-p")
	send([]string{"AUTH", "pipe-p", p}, []string{"PING"}, []string{"JOB.WAIT", second, "0"})
	if got := line(5 * time.Second); got != "+OK" {
		t.Fatalf("AUTH: %q", got)
	}
	if got := line(5 * time.Second); got != "+PONG" {
		t.Fatalf("the PING pipelined before a waiting JOB.WAIT: %q", got)
	}
	if err := admin.Do(context.Background(), "JOB.UPDATE", second, `{"status":"completed"}`).Err(); err != nil {
		t.Fatal(err)
	}
	if got := line(5 * time.Second); !strings.HasPrefix(got, "$") {
		t.Fatalf("JOB.WAIT after the job ended: %q", got)
	}
	if got := line(5 * time.Second); !strings.Contains(got, `"status":"completed"`) {
		t.Fatalf("JOB.WAIT after the job ended: %q", got)
	}
}
