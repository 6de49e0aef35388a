-- jobs_children with a small pending list: each probe of a GIN index scans
-- its whole list of entries not yet merged, and a graph walk probes once a
-- job, often right after its jobs were inserted (5,000 probes over the
-- default 4 MB list took seconds). Without a list (fastupdate off), each
-- insert of a job with after merges its entries alone, three to five times
-- slower; a list of 128 kB is merged in bulk by the inserts that fill it
-- and costs each probe a few pages.
ALTER INDEX jobs_children SET (gin_pending_list_limit = 128);
SELECT gin_clean_pending_list('jobs_children');
