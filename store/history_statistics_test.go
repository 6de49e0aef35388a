package store_test

import (
	"testing"
	"time"
)

// A new period's partitions gather the statistics their tables gather, not
// those of documents and bookkeeping (migration 031), and are analyzed as
// they double.
func TestHistoryPartitionsGatherTheirTablesStatistics(t *testing.T) {
	b := newTrBundle(t)
	lo := time.Now().UTC().Truncate(time.Hour).Add(48 * time.Hour)
	if err := b.st.PeriodCreate(b.ctx, lo, lo.Add(time.Hour), "stats"); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"jobs_history", "job_steps_history", "job_logs_history", "job_signals_history"} {
		part := table + "_stats"
		var parentOff, partOff []string
		for rel, into := range map[string]*[]string{table: &parentOff, part: &partOff} {
			if err := b.st.Pool.QueryRow(b.ctx, `
				SELECT coalesce(array_agg(attname::text ORDER BY attname), '{}') FROM pg_attribute
				WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attstattarget = 0`, rel).Scan(into); err != nil {
				t.Fatal(err)
			}
		}
		if len(parentOff) == 0 {
			t.Errorf("%s gathers the statistics of every column", table)
		}
		if len(partOff) != len(parentOff) {
			t.Errorf("%s gathers no statistics of %v, its partition %s of %v", table, parentOff, part, partOff)
		}
		var options []string
		if err := b.st.Pool.QueryRow(b.ctx, `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = $1::regclass`, part).Scan(&options); err != nil {
			t.Fatal(err)
		}
		if len(options) != 1 || options[0] != "autovacuum_analyze_scale_factor=1" {
			t.Errorf("%s has options %v", part, options)
		}
	}
	// Keys and what lists filter on keep their statistics.
	var kept int
	if err := b.st.Pool.QueryRow(b.ctx, `
		SELECT count(*) FROM pg_attribute WHERE attrelid = 'jobs_history_stats'::regclass
		  AND attname IN ('namespace', 'id', 'queue', 'status', 'type', 'finished_at') AND attstattarget <> 0`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if kept != 6 {
		t.Errorf("%d of jobs_history's six keys and filters keep their statistics", kept)
	}
}
