-- Per-queue flow control (QUEUE.CONFIG). A claim on a queue with limits
-- locks its row first, so claims on every node count the same running jobs
-- and the same starts; queues without limits are never locked.
-- rate_starts is the log of the starts within the last rate_period: at most
-- rate_limit timestamps, so a window is exact, not approximated.
ALTER TABLE queues
    ADD COLUMN max_running integer CHECK (max_running > 0),
    ADD COLUMN rate_limit  integer CHECK (rate_limit > 0),
    ADD COLUMN rate_period interval CHECK (rate_period > interval '0'),
    ADD COLUMN rate_starts timestamptz[] NOT NULL DEFAULT '{}',
    ADD CONSTRAINT queues_rate_whole CHECK ((rate_limit IS NULL) = (rate_period IS NULL));
