-- Per-type flow control (TYPE.CONFIG), as queues have it: a type's running
-- jobs and starts are counted across every queue. Only types with limits
-- have a row; a claim locks the rows of the limited types among the jobs
-- it is about to take, after the queue's row, in name order.
CREATE TABLE job_types (
    name        text PRIMARY KEY,
    max_running integer CHECK (max_running > 0),
    rate_limit  integer CHECK (rate_limit > 0),
    rate_period interval CHECK (rate_period > interval '0'),
    rate_starts timestamptz[] NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_types_rate_whole CHECK ((rate_limit IS NULL) = (rate_period IS NULL))
);
