-- The node that took leadership last (the advisory lock is the truth;
-- this row is for operators).
CREATE TABLE agq_leader (
    id      integer PRIMARY KEY CHECK (id = 1),
    node_id text NOT NULL,
    since   timestamptz NOT NULL
);

-- Jobs a worker let run past their timeout: the worker is flagged for
-- investigation (a likely hang).
ALTER TABLE workers ADD COLUMN timed_out_jobs integer NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN last_timeout_at timestamptz;
