package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// agqChain submits a chain of n jobs, each after the one before, that no
// worker takes; it times JOB.CANCEL of the first until every job of the
// chain is cancelled, then JOB.RETRY of the first until every other job
// is pending again (BRIEF §6h: under two seconds for up to 10,000 jobs,
// whatever the graph's shape).
func agqChain(ctx context.Context, cl *cluster, s *agqServer, n int) (cancel, restore time.Duration, err error) {
	queue := fmt.Sprintf("chain-%d", time.Now().UnixNano())
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			fmt.Fprintf(&b, `,{"job_id":"%s-%d","queue":%q,"type":"bench","after":["%s-%d"]}`, queue, i, queue, queue, i-1)
		} else {
			fmt.Fprintf(&b, `{"job_id":"%s-0","queue":%q,"type":"bench"}`, queue, queue)
		}
	}
	b.WriteByte(']')
	if err := s.admin.Do(ctx, "JOB.SUBMIT", b.String()).Err(); err != nil {
		return 0, 0, fmt.Errorf("submitting the chain: %w", err)
	}
	conn, err := pgx.Connect(ctx, cl.url("agq"))
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(ctx)
	// until polls the chain's statuses until done says they are reached.
	until := func(start time.Time, done func(cancelled, pending int) bool) (time.Duration, error) {
		for time.Since(start) < time.Minute {
			var cancelled, pending int
			if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'cancelled'), count(*) FILTER (WHERE status = 'pending')
				FROM jobs_all WHERE namespace = 'default' AND queue = $1`, queue).Scan(&cancelled, &pending); err != nil {
				return 0, err
			}
			if done(cancelled, pending) {
				return time.Since(start), nil
			}
			time.Sleep(5 * time.Millisecond)
		}
		return 0, fmt.Errorf("chain %s: not done within a minute", queue)
	}
	start := time.Now()
	if err := s.admin.Do(ctx, "JOB.CANCEL", queue+"-0").Err(); err != nil {
		return 0, 0, fmt.Errorf("JOB.CANCEL: %w", err)
	}
	if cancel, err = until(start, func(cancelled, _ int) bool { return cancelled == n }); err != nil {
		return 0, 0, err
	}
	start = time.Now()
	if err := s.admin.Do(ctx, "JOB.RETRY", queue+"-0").Err(); err != nil {
		return 0, 0, fmt.Errorf("JOB.RETRY: %w", err)
	}
	restore, err = until(start, func(_, pending int) bool { return pending == n-1 })
	return cancel, restore, err
}
