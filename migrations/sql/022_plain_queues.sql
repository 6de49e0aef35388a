-- A queue is plain until a job of it names a fair key, and fair from then
-- on. In a plain queue every job stands at pass 0, so claims take them by
-- priority and due time alone, as before fair share, and a submission
-- looks up no pass and writes no jobs_fair_tail entry. Jobs already there
-- become so too.
ALTER TABLE queues ADD COLUMN fair boolean NOT NULL DEFAULT false;

UPDATE queues SET fair = true
WHERE name IN (SELECT DISTINCT queue FROM jobs
               WHERE fair_key <> '' AND status NOT IN ('completed', 'failed', 'cancelled'));

UPDATE jobs SET fair_pass = 0
WHERE status IN ('queued', 'scheduled', 'retrying') AND fair_pass > 0
  AND queue IN (SELECT name FROM queues WHERE NOT fair);

-- A key's last pass: jobs at pass 0 (a plain queue's, or waiting from
-- before the queue turned fair) are no key's last.
DROP INDEX jobs_fair_tail;
CREATE INDEX jobs_fair_tail ON jobs (fair_key, queue, priority, fair_pass)
    WHERE status IN ('queued', 'scheduled', 'retrying') AND fair_pass > 0;
