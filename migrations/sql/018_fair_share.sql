-- Fair share inside a queue (stride scheduling). A job names its key
-- (fair_key, '' for none) and weight; its pass is where it stands in its
-- queue and priority: claims take the lowest pass first. A job's pass is
-- its key's last pass plus 1,000,000 / weight, or, for a key with no job
-- waiting, the queue's first waiting pass plus that: a key back from idle
-- starts level with the keys being served, with nothing saved up. The pass
-- is settled when a job is written due now, or by the first claim of its
-- queue once it is due (fair_pass NULL until then).
ALTER TABLE jobs
    ADD COLUMN fair_key text NOT NULL DEFAULT '',
    ADD COLUMN fair_weight integer NOT NULL DEFAULT 1 CHECK (fair_weight BETWEEN 1 AND 1000),
    ADD COLUMN fair_pass bigint,
    ALTER COLUMN fair_weight SET STATISTICS 0;

-- At most this many running jobs a named key (QUEUE.CONFIG MAXRUNNINGPERKEY).
ALTER TABLE queues ADD COLUMN max_running_per_key integer CHECK (max_running_per_key > 0);

-- Jobs waiting and due now keep today's order among themselves: they all
-- stand at pass 0, and every job written from now on after them.
UPDATE jobs SET fair_pass = 0
WHERE status IN ('queued', 'scheduled', 'retrying') AND run_at <= now();

-- The claim: one queue, waiting jobs, highest priority, then lowest pass,
-- then oldest due time. Jobs not yet placed (NULL) come last: a claim
-- places the due ones first.
DROP INDEX jobs_waiting;
CREATE INDEX jobs_waiting ON jobs (queue, priority DESC, fair_pass, run_at, seq)
    WHERE status IN ('queued', 'scheduled', 'retrying');

-- A key's last pass, where its next job goes. The key leads, so that no
-- claim (which names no key) takes this index for jobs_waiting.
CREATE INDEX jobs_fair_tail ON jobs (fair_key, queue, priority, fair_pass)
    WHERE status IN ('queued', 'scheduled', 'retrying') AND fair_pass IS NOT NULL;

-- Jobs waiting without a pass: due later, or made ready again by a report,
-- a release, a retry or a watchdog. Claims place the due ones.
CREATE INDEX jobs_unplaced ON jobs (queue, run_at, seq)
    WHERE status IN ('queued', 'scheduled', 'retrying') AND fair_pass IS NULL;

-- Every path that makes a job wait again (retries, snoozes, sleeps,
-- releases of dependencies, returns of lost workers' jobs, JOB.RETRY) or
-- moves it in time or priority leaves its pass unsettled: the first claim
-- after it is due places it behind its key's waiting jobs. A delivery given
-- back uncounted and due at once (the client left, or never acknowledged
-- it) keeps its place: as far as the queue is concerned it never ran. The
-- WHEN clause is all other updates pay.
CREATE FUNCTION agq_unplace_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.fair_pass := NULL;
    RETURN NEW;
END $$;
CREATE TRIGGER jobs_unplace BEFORE UPDATE OF status, run_at, priority ON jobs
    FOR EACH ROW
    WHEN (NEW.status IN ('queued', 'scheduled', 'retrying') AND NEW.fair_pass IS NOT NULL
          AND (OLD.status NOT IN ('queued', 'scheduled', 'retrying')
               OR NEW.run_at IS DISTINCT FROM OLD.run_at OR NEW.priority <> OLD.priority)
          AND NOT (OLD.status = 'running' AND NEW.attempt < OLD.attempt AND NEW.run_at <= now()))
    EXECUTE FUNCTION agq_unplace_job();
