package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// JobsSubmitCounted is JobsSubmit for a namespace with a quota on its
// unfinished jobs or its submissions (ns as the caller last read it): the
// namespace's row is locked, so that its submissions on every node are
// counted one after the other, and the jobs are inserted, counted and kept
// only within the quota. A batch past it stores nothing
// (*records.QuotaError); jobs already stored answer as always and count
// for nothing.
func (s *Store) JobsSubmitCounted(ctx context.Context, ns records.Namespace, jobs []records.NewJob, batch bool) ([]records.SubmitResult, []records.ReadyNote, error) {
	return s.submitAroundHistory(ctx, s.placedIn(jobs), batch, func(jobs []records.NewJob) ([]records.SubmitResult, []records.ReadyNote, error) {
		return s.jobsSubmitCounted(ctx, ns, jobs, batch)
	})
}

func (s *Store) jobsSubmitCounted(ctx context.Context, ns records.Namespace, jobs []records.NewJob, batch bool) ([]records.SubmitResult, []records.ReadyNote, error) {
	var res []records.SubmitResult
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		// The settings as they are now, under the lock.
		if err := tx.QueryRow(ctx, `
			SELECT coalesce(max_unfinished, 0), coalesce(submit_rate, 0), coalesce(submit_period, 0)
			FROM namespaces WHERE name = $1 FOR UPDATE`, ns.Name).
			Scan(&ns.MaxUnfinished, &ns.SubmitRate, &ns.SubmitPeriod); err != nil {
			return err
		}
		ns.SubmitPeriod *= time.Second
		var err error
		if res, err = insertAll(ctx, tx, jobs, batch); err != nil {
			return err
		}
		if withParents(jobs) {
			if err := linkParents(ctx, tx, ns.Name, jobs, res, batch); err != nil {
				return err
			}
		}
		created := 0
		for _, r := range res {
			if r.Created {
				created++
			}
		}
		if created == 0 {
			return nil
		}
		return countSubmissions(ctx, tx, ns, created)
	})
	if err != nil {
		return nil, nil, interpretError(err)
	}
	return res, submittedNotes(jobs, res), nil
}

// countSubmissions checks, in the transaction that inserted them, that
// created more jobs keep ns within its quotas, and counts them.
func countSubmissions(ctx context.Context, tx pgx.Tx, ns records.Namespace, created int) error {
	if ns.MaxUnfinished > 0 {
		// Counted up to one past the most: the count stops there.
		var n int64
		if err := tx.QueryRow(ctx, `
			SELECT count(*) FROM (`+unfinishedJobs+` LIMIT $2) held`, ns.Name, ns.MaxUnfinished+1).Scan(&n); err != nil {
			return err
		}
		if n > ns.MaxUnfinished {
			return &records.QuotaError{Namespace: ns.Name, Unfinished: ns.MaxUnfinished}
		}
	}
	var recent int64
	err := tx.QueryRow(ctx, `
		WITH counted AS (
			INSERT INTO namespace_submissions AS c (namespace, second, n)
			VALUES ($1, extract(epoch FROM statement_timestamp())::bigint, $2)
			ON CONFLICT (namespace, second) DO UPDATE SET n = c.n + excluded.n
		)
		SELECT coalesce(sum(n), 0) FROM namespace_submissions
		WHERE namespace = $1 AND second > extract(epoch FROM statement_timestamp())::bigint - $3`,
		ns.Name, created, max(int64(ns.SubmitPeriod/time.Second), 1)).Scan(&recent)
	if err != nil {
		return err
	}
	// The sum read the snapshot before this statement's own count.
	if ns.SubmitRate > 0 && recent+int64(created) > int64(ns.SubmitRate) {
		return &records.QuotaError{Namespace: ns.Name, Rate: true}
	}
	return nil
}

// SubmissionsSweep forgets the submission counts older than a day.
func (s *Store) SubmissionsSweep(ctx context.Context) error {
	_, err := s.Pool.Exec(ctx, `
		DELETE FROM namespace_submissions WHERE second < extract(epoch FROM now())::bigint - 86400`)
	return interpretError(err)
}
