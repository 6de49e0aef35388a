-- Fewer index writes per job. The four indexes on running jobs become one:
-- running jobs are few (no more than the workers run at once), so the
-- watchdog's sweeps read them all through it and filter by time. With no
-- index on ack_deadline, lease_expires_at or deadline_at, an acknowledgement,
-- progress and a heartbeat's lease extension change no indexed column and
-- are heap-only updates; the fill factor leaves room on each page for them.
DROP INDEX jobs_running_worker;
DROP INDEX jobs_running_ack;
DROP INDEX jobs_running_lease;
DROP INDEX jobs_running_deadline;
CREATE INDEX jobs_running ON jobs (worker_id) WHERE status = 'running';
ALTER TABLE jobs SET (fillfactor = 80);

-- Each delivery's token: a report naming another token is about an older
-- delivery, even one whose claim was lost in a database crash and whose
-- attempt number was therefore given again.
ALTER TABLE jobs ADD COLUMN delivery uuid;
