-- Waiting for the world (STEP.WAIT, JOB.SIGNAL): a step may wait for a
-- signal sent to its job, or for other jobs to end. While it waits the job
-- is awaiting: it holds no worker and is out of the claimable indexes.
ALTER TABLE jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('pending', 'queued', 'scheduled', 'running', 'retrying', 'awaiting',
                      'completed', 'failed', 'cancelled'));

-- An awaiting job holds its unique_key as a waiting one does.
DROP INDEX jobs_unique_key;
CREATE UNIQUE INDEX jobs_unique_key ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('pending', 'queued', 'scheduled', 'running', 'retrying', 'awaiting');

-- A wait is a step of kind wait; it is awaiting until its signal, its
-- jobs' ends or its deadline (wake_at) end it. replaced belongs to
-- JOB.RETRY FROM.
ALTER TABLE job_steps DROP CONSTRAINT job_steps_kind_check;
ALTER TABLE job_steps ADD CONSTRAINT job_steps_kind_check CHECK (kind IN ('step', 'sleep', 'wait'));
ALTER TABLE job_steps DROP CONSTRAINT job_steps_status_check;
ALTER TABLE job_steps ADD CONSTRAINT job_steps_status_check
    CHECK (status IN ('running', 'completed', 'failed', 'sleeping', 'awaiting', 'replaced'));

-- What a wait waits for: a signal's name, or the jobs named.
ALTER TABLE job_steps
    ADD COLUMN wait_signal text,
    ADD COLUMN wait_jobs text[];

-- The leader's sweep ends the waits whose deadline passed.
CREATE INDEX job_steps_deadline ON job_steps (wake_at) WHERE status = 'awaiting' AND wake_at IS NOT NULL;

-- A signal finds its job's open wait (a job has at most one).
CREATE INDEX job_steps_awaiting ON job_steps (job_id) WHERE status = 'awaiting';

-- Signals sent to a job, in arrival order (seq). A signal is taken by at
-- most one wait (taken_by, a step id of the job); token makes a re-sent
-- signal one. Its rows go with their job's.
CREATE TABLE job_signals (
    job_id     text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    seq        bigint GENERATED ALWAYS AS IDENTITY,
    name       text NOT NULL,
    payload    jsonb NOT NULL,
    token      text,
    taken_by   text,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, seq)
);

-- A wait takes the oldest signal of its name not yet taken.
CREATE INDEX job_signals_untaken ON job_signals (job_id, name, seq) WHERE taken_by IS NULL;

-- A signal sent again with its ID is found, and stored once.
CREATE UNIQUE INDEX job_signals_token ON job_signals (job_id, token) WHERE token IS NOT NULL;
