-- Walks down a job graph that one transaction cannot finish in bounded
-- work: restoring what a parent's end cancelled (JOB.RETRY of the parent)
-- and JOB.CANCEL … CASCADE. A row names a job whose descendants are still
-- to be walked; each batch deletes the rows it took and writes the next
-- ones in its own transaction, so a crash loses nothing: the leader's
-- sweep carries on from them.
CREATE TABLE graph_walks (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     text NOT NULL,
    kind       text NOT NULL CHECK (kind IN ('restore', 'cascade')),
    -- Written by a batch, not by the command that began the walk: jobs
    -- an earlier batch reached may wait for the ones the next reaches.
    resumed    boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX graph_walks_job ON graph_walks (job_id);

-- The jobs a parent's end cancelled, by that parent: a restore walks down
-- them one probe a job (status too: a job restored since is passed over in
-- the index). Only jobs cancelled because of a parent are in it.
CREATE INDEX jobs_cancelled_by ON jobs (cancelled_by, status) WHERE cancelled_by IS NOT NULL;
