-- Jobs that wait for other jobs (JOB.SUBMIT's after). A child waits in
-- status pending, out of jobs_waiting, so claims never see it.
ALTER TABLE jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('pending', 'queued', 'scheduled', 'running', 'retrying', 'completed', 'failed', 'cancelled'));

-- The parents named in after, kept for JOB.GET, the popped job's parents
-- and JOB.RETRY; what a parent's failure does to the child; and, on a
-- parent, whether any job waits for it: a plain job's end checks this one
-- flag and costs nothing more.
ALTER TABLE jobs
    ADD COLUMN after text[],
    ADD COLUMN on_parent_failure text NOT NULL DEFAULT 'cancel' CHECK (on_parent_failure IN ('cancel', 'run')),
    ADD COLUMN has_children boolean NOT NULL DEFAULT false,
    ALTER COLUMN after SET STATISTICS 0,
    ALTER COLUMN on_parent_failure SET STATISTICS 0,
    ALTER COLUMN has_children SET STATISTICS 0;

-- A pending job holds its unique_key as a waiting one does.
DROP INDEX jobs_unique_key;
CREATE UNIQUE INDEX jobs_unique_key ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('pending', 'queued', 'scheduled', 'running', 'retrying');

-- One row per parent not yet settled and child waiting for it. A parent's
-- end deletes its own rows (the key leads with it); a child is released
-- when none of its rows is left (job_waits_child). No parent's end writes
-- the child's row, so siblings ending together never wait for each other.
CREATE TABLE job_waits (
    parent_id text NOT NULL,
    child_id  text NOT NULL,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX job_waits_child ON job_waits (child_id);

-- Jobs to look at again: a parent that ended (its waits to settle) or a
-- child whose waits may all be gone (to release). A row is written in the
-- transaction that made the change, so a crash before the look loses
-- nothing: the leader's sweep finds it. No unique key: siblings marking one
-- child at once must not wait for each other.
CREATE TABLE dependency_checks (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dependency_checks_job ON dependency_checks (job_id);

-- Every path that ends a job (reports grouped or careful, cancellations,
-- the watchdog's failures) marks a parent here; the WHEN clause is all a
-- plain job's end pays.
CREATE FUNCTION agq_mark_parent_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO dependency_checks (job_id) VALUES (NEW.id);
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_parent_ended AFTER UPDATE OF status ON jobs
    FOR EACH ROW
    WHEN (NEW.has_children AND NEW.status IN ('completed', 'failed', 'cancelled')
          AND OLD.status NOT IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION agq_mark_parent_ended();

-- A job's children, for JOB.RETRY of a parent (restoring what its end
-- cancelled) and for retention (a parent is kept while a child is
-- unfinished). Only jobs with parents are in it: a plain job's insert
-- writes nothing to it.
CREATE INDEX jobs_children ON jobs USING gin (after) WHERE after IS NOT NULL;

-- The parent whose end cancelled this job: JOB.RETRY of that parent
-- restores it.
ALTER TABLE jobs ADD COLUMN cancelled_by text;
ALTER TABLE jobs ALTER COLUMN cancelled_by SET STATISTICS 0;
