-- Cron schedules. Each fire submits one job whose id is derived from the
-- schedule's name and the fire time, so a fire can never be doubled; the
-- scheduler claims due rows FOR UPDATE SKIP LOCKED and advances
-- next_fire_at in the transaction that submits the jobs.
CREATE TABLE schedules (
    name         text PRIMARY KEY,
    -- A robfig/cron spec: 6 fields with seconds, 5 fields, or a descriptor.
    cron         text NOT NULL,
    -- IANA name the cron fields are read in.
    timezone     text NOT NULL DEFAULT 'UTC',
    queue        text NOT NULL DEFAULT 'ready',
    -- The job each fire submits, defaults filled in: a JOB.SUBMIT document
    -- without job_id, queue, run_at, delay_seconds or unique_key.
    job          jsonb NOT NULL,
    enabled      boolean NOT NULL DEFAULT true,
    -- Missed fires replayed after downtime; older ones are skipped.
    max_catchup  integer NOT NULL DEFAULT 100 CHECK (max_catchup >= 0),
    -- The first fire not yet submitted; NULL when the spec fires no more.
    next_fire_at timestamptz,
    last_fire_at timestamptz,
    fires        bigint NOT NULL DEFAULT 0,
    skipped      bigint NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- The sweep: enabled schedules whose next fire has come, oldest first.
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE enabled AND next_fire_at IS NOT NULL;
