-- jobs_children without its pending list: each probe of a GIN index scans
-- the whole list of entries not yet merged, and a graph walk probes once a
-- job, right after its jobs were inserted (5,000 probes over 10,000
-- pending entries took seconds). Inserts of jobs with after now merge
-- their entries at once, as a btree would.
ALTER INDEX jobs_children SET (fastupdate = off);
SELECT gin_clean_pending_list('jobs_children');
