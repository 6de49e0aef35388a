package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/internal/agqtest"
)

const (
	pipeJobs     = 50000
	pipeKillFrom = 10000 // replies read before agq is killed
	pipeQueue    = "piped"
)

// A bulk load pipelined as redis-cli --pipe sends it, with agq killed
// (SIGKILL) partway: every job whose reply was sent is stored, and the
// load sent again after the restart, with the same job ids, stores the
// rest and doubles nothing.
func TestKillDuringAPipelinedLoadKeepsEveryJobAnswered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := newAgqProcess(t, buildAgq(t), agqtest.NewDatabase(t))
	srv.start(ctx)

	load := pipeLoad(pipeJobs)
	answered := loadUntilKilled(ctx, t, srv, load)
	if answered < pipeKillFrom {
		t.Fatalf("only %d replies before the kill", answered)
	}
	db, err := pgx.Connect(ctx, srv.databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	stored := storedJobs(ctx, t, db)
	for i := range answered {
		if !stored[pipeJobID(i)] {
			t.Fatalf("job %s was answered before the kill but is not stored (%d answered, %d stored)", pipeJobID(i), answered, len(stored))
		}
	}
	t.Logf("%d answered before the kill, %d stored", answered, len(stored))

	srv.start(ctx)
	cmd := exec.CommandContext(ctx, agqtest.RedisCLIPath(t), "-u", "redis://"+srv.addr, "--pipe")
	cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+srv.adminKey)
	cmd.Stdin = bytes.NewReader(load)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("errors: 0, replies: %d", pipeJobs)) {
		t.Fatalf("redis-cli --pipe sent again: %v\n%s", err, out)
	}
	var n, distinct int
	if err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT id) FROM jobs_all WHERE queue = $1`, pipeQueue).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != pipeJobs || distinct != pipeJobs {
		t.Fatalf("after the load was sent again: %d jobs (%d distinct), want %d", n, distinct, pipeJobs)
	}
}

func pipeJobID(i int) string { return fmt.Sprintf("pipe-%d", i) }

// pipeLoad is n LPUSHes of one job each, as a file fed to redis-cli --pipe.
func pipeLoad(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		doc := fmt.Sprintf(`{"job_id":%q,"type":"load"}`, pipeJobID(i))
		key := "queue:" + pipeQueue
		fmt.Fprintf(&b, "*3\r\n$5\r\nLPUSH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(key), key, len(doc), doc)
	}
	return b.Bytes()
}

// loadUntilKilled authenticates, writes the whole load on one connection,
// reads the replies in order, kills agq once pipeKillFrom have come, and
// answers how many LPUSHes were answered.
func loadUntilKilled(ctx context.Context, t *testing.T, srv *agqProcess, load []byte) int {
	t.Helper()
	conn, err := net.Dial("tcp", srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() {
		fmt.Fprintf(conn, "*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(srv.adminKey), srv.adminKey)
		conn.Write(load) // ends with an error once agq is killed
	}()
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("AUTH: %q %v", line, err)
	}
	answered := 0
	for {
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		line, err := r.ReadString('\n')
		if err != nil {
			if srv.cmd != nil {
				t.Fatalf("reading reply %d: %v", answered+1, err)
			}
			return answered // agq is gone: the rest of the load was never answered
		}
		if !strings.HasPrefix(line, ":") {
			t.Fatalf("reply %d: %q", answered+1, line)
		}
		answered++
		if answered == pipeKillFrom {
			srv.kill()
		}
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
	}
}

// storedJobs is the ids of the queue's jobs in the database.
func storedJobs(ctx context.Context, t *testing.T, db *pgx.Conn) map[string]bool {
	t.Helper()
	rows, err := db.Query(ctx, `SELECT id FROM jobs_all WHERE queue = $1`, pipeQueue)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	stored := make(map[string]bool, len(ids))
	for _, id := range ids {
		stored[id] = true
	}
	return stored
}
