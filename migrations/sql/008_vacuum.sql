-- Claims skip the index entries of jobs already claimed until a vacuum
-- removes them: with PostgreSQL's defaults (a fifth of the table dead) a
-- busy queue reads hundreds of dead entries per claim. The jobs table is
-- vacuumed after a small, fixed number of changes instead, without the
-- cost-based pauses that would let a vacuum fall behind the queue.
ALTER TABLE jobs SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 2000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
