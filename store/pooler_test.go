package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agq/agq/engine"
	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

func TestBehindAPooler(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	direct := agqtest.NewDatabase(t)
	dc, err := pgconn.ParseConfig(direct)
	if err != nil {
		t.Fatal(err)
	}
	pooled := agqtest.StartPgBouncer(t, agqtest.Cluster(t)).URL(dc.Database)

	t.Run("PgBouncerIsToldFromPostgreSQL", func(t *testing.T) {
		for url, want := range map[string]bool{direct: false, pooled: true} {
			got, err := store.ThroughPooler(ctx, url)
			if err != nil || got != want {
				t.Errorf("ThroughPooler(%s) = %v, %v; want %v", url, got, err, want)
			}
		}
	})

	t.Run("APooledStoreSendsNoNamedPreparedStatements", func(t *testing.T) {
		for _, tc := range []struct {
			url    string
			pooled bool
			want   pgx.QueryExecMode
		}{
			{direct, false, pgx.QueryExecModeCacheStatement},
			{pooled, true, pgx.QueryExecModeCacheDescribe},
			// The URL's own choice stands (PgBouncer 1.21 and newer can
			// keep prepared statements).
			{pooled + " default_query_exec_mode=exec", true, pgx.QueryExecModeExec},
		} {
			st, err := store.Open(ctx, store.Config{URL: tc.url, Pooled: tc.pooled, MaxConns: 1})
			if err != nil {
				t.Fatal(err)
			}
			got := st.Pool.Config().ConnConfig.DefaultQueryExecMode
			st.Close()
			if got != tc.want {
				t.Errorf("%s, pooled %v: exec mode %v, want %v", tc.url, tc.pooled, got, tc.want)
			}
		}
	})

	// JIT is off for every statement of a direct connection, and for a
	// pooled store's graph transactions (noJIT): a graph walk's estimate
	// passes jit_above_cost.
	t.Run("StatementsRunWithoutJIT", func(t *testing.T) {
		for _, tc := range []struct {
			url    string
			pooled bool
		}{{direct, false}, {pooled, true}} {
			st, err := store.Open(ctx, store.Config{URL: tc.url, Pooled: tc.pooled, MaxConns: 1, Rules: engine.Decisions{}})
			if err != nil {
				t.Fatal(err)
			}
			var jit string
			err = pgx.BeginFunc(ctx, st.Pool, func(tx pgx.Tx) error {
				if err := st.NoJIT(ctx, tx); err != nil {
					return err
				}
				return tx.QueryRow(ctx, `SELECT current_setting('jit')`).Scan(&jit)
			})
			if err != nil || jit != "off" {
				t.Errorf("%s, pooled %v: a graph transaction runs with jit %q (%v)", tc.url, tc.pooled, jit, err)
			}
			if !tc.pooled {
				if err := st.Pool.QueryRow(ctx, `SELECT current_setting('jit')`).Scan(&jit); err != nil || jit != "off" {
					t.Errorf("a direct connection runs with jit %q (%v)", jit, err)
				}
			}
			st.Close()
		}
	})

	t.Run("ConcurrentSubmissionsAndReadsWork", func(t *testing.T) {
		st, err := store.Open(ctx, store.Config{URL: pooled, Pooled: true, Rules: engine.Decisions{}})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := range 25 {
					id := fmt.Sprintf("p-%d-%d", w, i)
					job := records.NewJob{ID: id, Queue: "ready", Requires: []string{"t"}, MaxAttempts: 3, RetryBackoffSeconds: 1, TimeoutSeconds: 60}
					if _, _, err := st.JobsSubmit(ctx, []records.NewJob{job}); err != nil {
						t.Errorf("submitting %s: %v", id, err)
						return
					}
					if j, err := st.JobGet(ctx, id); err != nil || j.ID != id {
						t.Errorf("reading %s: %+v, %v", id, j, err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
}
