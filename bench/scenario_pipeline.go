package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pipelined submission, as Redis users bulk-load: one connection that
// sends commands without waiting for their replies.

// agqPipeLoad loads n jobs with the real `redis-cli --pipe`: a stream of
// AUTH and n LPUSHes on its stdin, written as fast as the socket takes it.
func agqPipeLoad(ctx context.Context, s *agqServer, n int) (float64, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return 0, fmt.Errorf("redis-cli --pipe needs redis-cli on PATH: %w", err)
	}
	queue := "pipe-cli"
	var in bytes.Buffer
	writeCommand(&in, "AUTH", s.adminKey)
	for range n {
		writeCommand(&in, "LPUSH", "queue:"+queue, jobDoc(queue, 0))
	}
	host, port, err := net.SplitHostPort(s.addr)
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, cli, "-h", host, "-p", port, "--pipe")
	cmd.Stdin = &in
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("redis-cli --pipe: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("errors: 0, replies: %d", n+1); !strings.Contains(string(out), want) {
		return 0, fmt.Errorf("redis-cli --pipe answered %q, want %q", out, want)
	}
	return float64(n) / d.Seconds(), nil
}

// writeCommand appends one command in RESP, as redis-cli --pipe reads it.
func writeCommand(b *bytes.Buffer, args ...string) {
	fmt.Fprintf(b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(b, "$%d\r\n%s\r\n", len(a), a)
	}
}

// agqPipelined submits n single jobs from one connection, depth at a time
// in one go-redis pipeline.
func agqPipelined(ctx context.Context, s *agqServer, n, depth int) (float64, error) {
	queue := fmt.Sprintf("pipeline-%d", depth)
	c := redis.NewClient(&redis.Options{Addr: s.addr, Password: s.adminKey, PoolSize: 1})
	defer c.Close()
	start := time.Now()
	for done := 0; done < n; {
		k := min(depth, n-done)
		pipe := c.Pipeline()
		for range k {
			pipe.Do(ctx, "JOB.SUBMIT", jobDoc(queue, 0))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, err
		}
		done += k
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
