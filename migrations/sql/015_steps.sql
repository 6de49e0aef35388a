-- Durable steps: a job's named steps and sleeps, whose outputs survive the
-- job's retries. A separate table, so that a plain job's claim and reports
-- touch none of it; its rows go with their job's (retention, deletion).
CREATE TABLE job_steps (
    job_id                text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    step_id               text NOT NULL,
    -- The order first begun, from 1: JOB.STEPS pages by it, and the
    -- highest is the job's count of steps.
    ord                   integer NOT NULL,
    kind                  text NOT NULL CHECK (kind IN ('step', 'sleep')),
    -- running is shown as interrupted once its delivery ended.
    status                text NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'sleeping')),
    -- Attempts of this step, counted from 1 when first begun.
    attempts              integer NOT NULL DEFAULT 0,
    max_attempts          integer NOT NULL,
    retry_backoff_seconds double precision NOT NULL,
    input                 jsonb NOT NULL DEFAULT 'null',
    output                jsonb,
    errors                jsonb NOT NULL DEFAULT '[]',
    -- The delivery that began the current attempt (or the sleep): a call
    -- sent again by it is recognised, and a later one resumes after it.
    delivery              uuid,
    began_at              timestamptz NOT NULL DEFAULT now(),
    completed_at          timestamptz,
    wake_at               timestamptz,
    PRIMARY KEY (job_id, step_id)
);

-- JOB.STEPS in the order first begun; max(ord) counts a job's steps.
CREATE UNIQUE INDEX job_steps_order ON job_steps (job_id, ord);

-- The watchdog finds the step a lost delivery left open.
CREATE INDEX job_steps_open ON job_steps (job_id) WHERE status = 'running';

-- Deliveries ended by a failure while a step was open: they count against
-- the step's attempts, so the job's own attempts are attempt minus these.
ALTER TABLE jobs ADD COLUMN step_failures int NOT NULL DEFAULT 0;
ALTER TABLE jobs ALTER COLUMN step_failures SET STATISTICS 0;
