-- A job's W3C trace context (JOB.SUBMIT's traceparent and tracestate, or
-- the submission span agq started). Kept apart from the job's contents: a
-- re-sent job with another traceparent is the same job. NULL for a job
-- submitted without one while tracing is off, which costs nothing.
ALTER TABLE jobs
    ADD COLUMN traceparent text,
    ADD COLUMN tracestate text,
    ALTER COLUMN traceparent SET STATISTICS 0,
    ALTER COLUMN tracestate SET STATISTICS 0;
