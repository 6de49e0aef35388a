-- Autovacuum analyzes a history partition each time its rows grow by a
-- tenth, every few seconds while jobs finish fast, and each analysis
-- gathered statistics of every column: documents, results, step outputs,
-- bookkeeping that no statement filters or sorts on (measured on a
-- partition of 166,667 jobs: 365 ms an analysis, 172 ms without them).
-- As for jobs (014), they are not gathered. Setting them on the
-- partitioned tables sets them on the partitions there are; the store
-- copies them onto each partition it creates (periodCreate), which also
-- has it analyzed as it doubles rather than as it grows by a tenth.
ALTER TABLE jobs_history
    ALTER COLUMN seq SET STATISTICS 0,
    ALTER COLUMN requires SET STATISTICS 0,
    ALTER COLUMN plan SET STATISTICS 0,
    ALTER COLUMN inputs SET STATISTICS 0,
    ALTER COLUMN payload SET STATISTICS 0,
    ALTER COLUMN priority SET STATISTICS 0,
    ALTER COLUMN attempt SET STATISTICS 0,
    ALTER COLUMN max_attempts SET STATISTICS 0,
    ALTER COLUMN retry_backoff_seconds SET STATISTICS 0,
    ALTER COLUMN timeout_seconds SET STATISTICS 0,
    ALTER COLUMN run_at SET STATISTICS 0,
    ALTER COLUMN unique_key SET STATISTICS 0,
    ALTER COLUMN worker_id SET STATISTICS 0,
    ALTER COLUMN ack_deadline SET STATISTICS 0,
    ALTER COLUMN lease_expires_at SET STATISTICS 0,
    ALTER COLUMN deadline_at SET STATISTICS 0,
    ALTER COLUMN cancel_requested SET STATISTICS 0,
    ALTER COLUMN unacked_returns SET STATISTICS 0,
    ALTER COLUMN progress SET STATISTICS 0,
    ALTER COLUMN result SET STATISTICS 0,
    ALTER COLUMN errors SET STATISTICS 0,
    ALTER COLUMN created_at SET STATISTICS 0,
    ALTER COLUMN started_at SET STATISTICS 0,
    ALTER COLUMN updated_at SET STATISTICS 0,
    ALTER COLUMN delivery SET STATISTICS 0,
    ALTER COLUMN snoozes SET STATISTICS 0,
    ALTER COLUMN step_failures SET STATISTICS 0,
    ALTER COLUMN on_parent_failure SET STATISTICS 0,
    ALTER COLUMN has_children SET STATISTICS 0,
    ALTER COLUMN traceparent SET STATISTICS 0,
    ALTER COLUMN tracestate SET STATISTICS 0,
    ALTER COLUMN fair_key SET STATISTICS 0,
    ALTER COLUMN fair_weight SET STATISTICS 0,
    ALTER COLUMN fair_pass SET STATISTICS 0,
    ALTER COLUMN submitted_by SET STATISTICS 0;

-- Steps are read by their job's key, and waits (in job_steps only) by
-- their deadline.
DO $$
DECLARE
    t text;
    c text;
BEGIN
    FOREACH t IN ARRAY ARRAY['job_steps', 'job_steps_history'] LOOP
        FOREACH c IN ARRAY ARRAY['attempts', 'max_attempts', 'retry_backoff_seconds', 'input', 'output', 'errors',
                'delivery', 'began_at', 'completed_at', 'wait_signal', 'wait_jobs', 'history', 'attempt_ended'] LOOP
            EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET STATISTICS 0', t, c);
        END LOOP;
    END LOOP;
END $$;
ALTER TABLE job_steps_history ALTER COLUMN wake_at SET STATISTICS 0;
ALTER TABLE job_logs_history
    ALTER COLUMN line SET STATISTICS 0,
    ALTER COLUMN at SET STATISTICS 0;
ALTER TABLE job_signals_history
    ALTER COLUMN payload SET STATISTICS 0,
    ALTER COLUMN token SET STATISTICS 0,
    ALTER COLUMN taken_by SET STATISTICS 0,
    ALTER COLUMN created_at SET STATISTICS 0;

DO $$
DECLARE
    p record;
    t text;
BEGIN
    FOR p IN SELECT suffix FROM history_periods LOOP
        FOREACH t IN ARRAY ARRAY['jobs_history', 'job_steps_history', 'job_logs_history', 'job_signals_history'] LOOP
            EXECUTE format('ALTER TABLE %I SET (autovacuum_analyze_scale_factor = 1)', t || '_' || p.suffix);
        END LOOP;
    END LOOP;
END $$;
