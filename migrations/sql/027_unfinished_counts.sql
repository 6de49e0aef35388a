-- Every job's path (queued, running, ended) wrote an entry into
-- jobs_unfinished at each of its first two steps, all of them on the same
-- few leaf pages of ('default', 'queued') and ('default', 'running'). A
-- namespace's unfinished jobs are counted instead through the indexes the
-- hot path writes anyway, its waiting ones through jobs_waiting and its
-- running ones through jobs_running, and its pending and awaiting ones
-- through jobs_parked, which the plain path never writes.
DROP INDEX jobs_unfinished;
CREATE INDEX jobs_parked ON jobs (namespace, status) WHERE status IN ('pending', 'awaiting');
