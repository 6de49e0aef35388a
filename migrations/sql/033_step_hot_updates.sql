-- A step's completion changed its row's status, which the predicates of
-- job_steps' partial indexes read, so that no completion could be a HOT
-- update: each wrote an entry in every index of job_steps, and left the
-- old ones to vacuum. The predicates now read two columns derived from the
-- status, which a completion (running to completed) and a step begun again
-- leave as they were; and job_steps' pages keep room for the row's new
-- version beside the old.
ALTER TABLE job_steps
    ADD COLUMN replaced boolean NOT NULL GENERATED ALWAYS AS (status = 'replaced') STORED,
    ADD COLUMN awaiting boolean NOT NULL GENERATED ALWAYS AS (status = 'awaiting') STORED,
    SET (fillfactor = 80);

DROP INDEX job_steps_live;
CREATE UNIQUE INDEX job_steps_live ON job_steps (namespace, job_id, step_id) WHERE NOT replaced;
DROP INDEX job_steps_awaiting;
CREATE INDEX job_steps_awaiting ON job_steps (namespace, job_id) WHERE awaiting;
DROP INDEX job_steps_deadline;
CREATE INDEX job_steps_deadline ON job_steps (wake_at) WHERE awaiting AND wake_at IS NOT NULL;

-- Moves copy rows by position: the history table takes the columns too,
-- as stored values.
ALTER TABLE job_steps_history
    ADD COLUMN replaced boolean,
    ADD COLUMN awaiting boolean;
ALTER TABLE job_steps_history
    ALTER COLUMN replaced SET STATISTICS 0,
    ALTER COLUMN awaiting SET STATISTICS 0;
CREATE OR REPLACE VIEW job_steps_all AS
    SELECT NULL::timestamptz AS expires_at, s.* FROM job_steps s
    UNION ALL SELECT * FROM job_steps_history;
