-- Each step attempt kept (JOB.STEPS' history). history holds the entries
-- of a step's attempts that ended, oldest first: {attempt, began_at,
-- ended_at, outcome, error}. An attempt's entry is written when the next
-- attempt begins (read from the row: completed, failed, or interrupted
-- when its delivery ended with the step open), or at once when the
-- watchdog ends its delivery (interrupted, timed_out); attempt_ended says
-- the current attempt's entry is written. JOB.STEPS reads the current
-- attempt's entry from the row until then. Plain jobs have no rows here,
-- and completions write nothing more.
ALTER TABLE job_steps
    ADD COLUMN history jsonb NOT NULL DEFAULT '[]',
    ADD COLUMN attempt_ended boolean NOT NULL DEFAULT false;

-- JOB.RETRY … FROM forgets a job's steps from one of them on: their rows
-- stay, status replaced, and a step begun again gets a row of its own, at
-- the job's next order. A job has one row per order (the key, which
-- JOB.STEPS pages by) and one live row per step id (job_steps_live, which
-- the step calls find their step through).
ALTER TABLE job_steps DROP CONSTRAINT job_steps_pkey;
ALTER TABLE job_steps ADD CONSTRAINT job_steps_order PRIMARY KEY USING INDEX job_steps_order;
CREATE UNIQUE INDEX job_steps_live ON job_steps (job_id, step_id) WHERE status <> 'replaced';
