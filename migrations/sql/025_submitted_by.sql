-- The worker principal whose key submitted a job (a parent spawning its
-- children), NULL for jobs submitted by any other key: a worker key reads,
-- waits on and follows only the jobs it submitted. Looked up by the job's
-- id alone, so it needs no index.
ALTER TABLE jobs ADD COLUMN submitted_by text;
