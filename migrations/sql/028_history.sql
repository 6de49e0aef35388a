-- History: finished jobs leave the hot tables. The leader moves them, with
-- their steps, log lines and signals, a few seconds after they end, into tables
-- partitioned by the time they expire (their namespace's retention past
-- their end); retention drops whole partitions once their time has passed.
-- jobs then holds unfinished and just-finished jobs only, whatever the
-- history, and expiring a period costs a DROP TABLE, not a delete a row.
--
-- The history tables have expires_at, then the hot tables' columns in the
-- same order: moves copy rows by position. A migration adding a column to
-- jobs, job_steps, job_logs or job_signals adds it to the history table
-- too (both at the end), and recreates the _all view below.

-- The periods: one row a partition of each history table, created ahead of
-- the moves that fill it, dropped with it. Ranges are aligned to their
-- width (an hour, a day or thirty days), so two never overlap.
CREATE TABLE history_periods (
    lo     timestamptz PRIMARY KEY,
    hi     timestamptz NOT NULL,
    suffix text NOT NULL UNIQUE,
    CHECK (hi > lo)
);

CREATE TABLE jobs_history (expires_at timestamptz NOT NULL, LIKE jobs INCLUDING DEFAULTS)
    PARTITION BY RANGE (expires_at);
-- Reads by id (JOB.GET, a re-submitted id, a parent's result); lists by
-- queue and status (jobs_queue_status), by end (jobs_finished); children
-- and graph restores.
CREATE INDEX jobs_history_id ON jobs_history (namespace, id);
CREATE INDEX jobs_history_queue_status ON jobs_history (namespace, queue, status, id);
CREATE INDEX jobs_history_children ON jobs_history USING gin (after) WHERE after IS NOT NULL;
CREATE INDEX jobs_history_finished ON jobs_history (namespace, status, finished_at);
CREATE INDEX jobs_history_cancelled_by ON jobs_history (namespace, cancelled_by) WHERE cancelled_by IS NOT NULL;

CREATE TABLE job_steps_history (expires_at timestamptz NOT NULL, LIKE job_steps INCLUDING DEFAULTS)
    PARTITION BY RANGE (expires_at);
CREATE INDEX job_steps_history_job ON job_steps_history (namespace, job_id, ord);

CREATE TABLE job_logs_history (expires_at timestamptz NOT NULL, LIKE job_logs INCLUDING DEFAULTS)
    PARTITION BY RANGE (expires_at);
CREATE INDEX job_logs_history_job ON job_logs_history (namespace, job_id, attempt, seq);

CREATE TABLE job_signals_history (expires_at timestamptz NOT NULL, LIKE job_signals INCLUDING DEFAULTS)
    PARTITION BY RANGE (expires_at);
CREATE INDEX job_signals_history_job ON job_signals_history (namespace, job_id, seq);

-- A job's steps, log lines and signals are deleted with it by the store
-- (moves, namespace deletion), not by cascades: a cascade costs three
-- trigger calls a moved job, and every step begun a lock on its job's key.
ALTER TABLE job_steps DROP CONSTRAINT job_steps_job_fkey;
ALTER TABLE job_logs DROP CONSTRAINT job_logs_job_fkey;
ALTER TABLE job_signals DROP CONSTRAINT job_signals_job_fkey;

-- Reads that may find a job in either place (by id, lists, counts): the
-- planner takes their conditions into each side. expires_at is NULL for a
-- job not yet in history.
CREATE VIEW jobs_all AS
    SELECT NULL::timestamptz AS expires_at, j.* FROM jobs j
    UNION ALL SELECT * FROM jobs_history;
CREATE VIEW job_steps_all AS
    SELECT NULL::timestamptz AS expires_at, s.* FROM job_steps s
    UNION ALL SELECT * FROM job_steps_history;
CREATE VIEW job_logs_all AS
    SELECT NULL::timestamptz AS expires_at, l.* FROM job_logs l
    UNION ALL SELECT * FROM job_logs_history;
CREATE VIEW job_signals_all AS
    SELECT NULL::timestamptz AS expires_at, g.* FROM job_signals g
    UNION ALL SELECT * FROM job_signals_history;
