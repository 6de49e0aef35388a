-- How many jobs of each queue and status each history period holds, kept
-- by the statements that move jobs into, out of and between periods and
-- dropped with a period's rows. INFO, QUEUE.STATS and DBSIZE count a
-- namespace's finished jobs from here instead of reading every job in
-- history: with ten million of them, INFO took longer than a client's
-- read timeout.
CREATE TABLE history_counts (
    namespace text NOT NULL,
    queue     text NOT NULL,
    status    text NOT NULL,
    period_lo timestamptz NOT NULL,
    n         bigint NOT NULL,
    PRIMARY KEY (namespace, queue, status, period_lo)
);

-- Jobs already in history: counted once, here.
INSERT INTO history_counts (namespace, queue, status, period_lo, n)
SELECT h.namespace, h.queue, h.status, p.lo, count(*)
FROM jobs_history h JOIN history_periods p ON h.expires_at >= p.lo AND h.expires_at < p.hi
GROUP BY 1, 2, 3, 4;
