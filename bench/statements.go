package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
)

// statementsReset starts pg_stat_statements' counts afresh in db.
func (c *cluster) statementsReset(ctx context.Context, db string) error {
	conn, err := pgx.Connect(ctx, c.url(db))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return err
	}
	if _, err = conn.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return err
	}
	if c.updates == nil {
		c.updates = map[string]map[string][2]int64{}
	}
	c.updates[db], err = tableUpdates(ctx, conn)
	return err
}

// tableUpdates are the counts of row updates of the hot tables, and of
// those among them that were HOT (no index entry written), by table.
func tableUpdates(ctx context.Context, conn *pgx.Conn) (map[string][2]int64, error) {
	rows, err := conn.Query(ctx, `SELECT relname::text, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname IN ('jobs', 'job_steps')`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][2]int64{}
	for rows.Next() {
		var name string
		var upd, hot int64
		if err := rows.Scan(&name, &upd, &hot); err != nil {
			return nil, err
		}
		out[name] = [2]int64{upd, hot}
	}
	return out, rows.Err()
}

// statementsPrint writes db's statements by total execution time, with
// their cost per job, to w.
func (c *cluster) statementsPrint(ctx context.Context, db string, jobs int, w io.Writer) error {
	conn, err := pgx.Connect(ctx, c.url(db))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if before, ok := c.updates[db]; ok {
		after, err := tableUpdates(ctx, conn)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\n%s row updates per job (HOT of them, as the statistics had them counted):", db)
		for _, table := range []string{"jobs", "job_steps"} {
			upd, hot := after[table][0]-before[table][0], after[table][1]-before[table][1]
			fmt.Fprintf(w, " %s %.2f (%.0f%%)", table, float64(upd)/float64(max(jobs, 1)), 100*float64(hot)/float64(max(upd, 1)))
		}
		fmt.Fprintln(w)
	}
	rows, err := conn.Query(ctx, `
		SELECT s.calls, s.rows, s.total_exec_time + s.total_plan_time, s.plans, s.total_plan_time, s.wal_bytes, s.shared_blks_hit + s.shared_blks_read, s.query
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
		WHERE d.datname = $1 ORDER BY s.total_exec_time DESC LIMIT 12`, db)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Fprintf(w, "\n%s statements (per job: calls, planning and execution µs, planning µs, WAL bytes, buffers)\n", db)
	for rows.Next() {
		var calls, nrows, wal int64
		var blocks int64
		var total, planTime float64
		var plans int64
		var query string
		if err := rows.Scan(&calls, &nrows, &total, &plans, &planTime, &wal, &blocks, &query); err != nil {
			return err
		}
		n := float64(max(jobs, 1))
		query = strings.Join(strings.Fields(query), " ")
		if len(query) > 110 {
			query = query[:110] + "…"
		}
		fmt.Fprintf(w, "%6.3f %7.1f %7.1f %6.0f %6.1f  rows/call %5.1f  plans/call %4.2f  %s\n",
			float64(calls)/n, total*1000/n, planTime*1000/n, float64(wal)/n, float64(blocks)/n, float64(nrows)/float64(max(calls, 1)), float64(plans)/float64(max(calls, 1)), query)
	}
	return rows.Err()
}
