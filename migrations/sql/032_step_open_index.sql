-- Each STEP.BEGIN wrote an entry in job_steps_open, which its completion
-- left for vacuum: a third of a begin's index writes, for the watchdog's
-- lookups of the step a lost delivery left open. Those read a job's steps
-- through the key (job_steps_order) instead: a job's steps are at most
-- 10,000, and such lookups are for lost deliveries only.
DROP INDEX job_steps_open;
