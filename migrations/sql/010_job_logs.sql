-- The last lines a worker published for each attempt of a job, for a
-- viewer who missed them live (JOB.LOGS). Deleted with the job.
CREATE TABLE job_logs (
    job_id   text    NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt  integer NOT NULL,
    seq      bigint  GENERATED ALWAYS AS IDENTITY,
    line     text    NOT NULL,
    at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, attempt, seq)
);
