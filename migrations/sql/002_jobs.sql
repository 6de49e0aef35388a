-- Queues exist once a job names them; the row carries the paused flag.
CREATE TABLE queues (
    name       text PRIMARY KEY,
    paused     boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE workers (
    worker_id           text PRIMARY KEY,
    principal           text NOT NULL,
    state               text NOT NULL CHECK (state IN ('ACTIVE', 'DRAINING', 'DEAD', 'UNREGISTERED')),
    hostname            text NOT NULL,
    platform            text NOT NULL DEFAULT '',
    agw_version         text NOT NULL,
    -- tools ∪ agentic_units ∪ types: what the claim filter compares with.
    capabilities        text[] NOT NULL,
    metadata            jsonb NOT NULL,
    max_concurrent_jobs integer NOT NULL DEFAULT 1,
    stats               jsonb,
    registered_at       timestamptz NOT NULL DEFAULT now(),
    last_heartbeat_at   timestamptz NOT NULL DEFAULT now(),
    state_changed_at    timestamptz NOT NULL DEFAULT now()
);

-- The worker a pooled connection acts as: its principal's live worker.
CREATE INDEX workers_live_principal ON workers (principal, registered_at) WHERE state IN ('ACTIVE', 'DRAINING');

-- Liveness checks look only at live workers, oldest heartbeat first.
CREATE INDEX workers_live_heartbeat ON workers (last_heartbeat_at) WHERE state IN ('ACTIVE', 'DRAINING');

CREATE TABLE jobs (
    id                    text PRIMARY KEY,
    -- Submission order: among jobs of equal priority and due time, the
    -- first submitted is the first delivered (a batch, LPUSH a b c).
    seq                   bigint GENERATED ALWAYS AS IDENTITY,
    queue                 text NOT NULL,
    type                  text NOT NULL DEFAULT '',
    requires              text[] NOT NULL DEFAULT '{}',
    plan                  jsonb,
    inputs                jsonb,
    payload               jsonb,
    priority              integer NOT NULL DEFAULT 0,
    -- queued/scheduled/retrying wait for run_at; running is held by worker_id.
    status                text NOT NULL CHECK (status IN ('queued', 'scheduled', 'running', 'retrying', 'completed', 'failed', 'cancelled')),
    attempt               integer NOT NULL DEFAULT 0,
    max_attempts          integer NOT NULL,
    retry_backoff_seconds double precision NOT NULL DEFAULT 1,
    timeout_seconds       integer NOT NULL,
    run_at                timestamptz NOT NULL DEFAULT now(),
    unique_key            text,
    worker_id             text,
    -- Set on delivery, cleared by the worker's first JOB.UPDATE.
    ack_deadline          timestamptz,
    -- Extended by the holder's heartbeats.
    lease_expires_at      timestamptz,
    -- started_at + timeout_seconds of the current attempt.
    deadline_at           timestamptz,
    cancel_requested      boolean NOT NULL DEFAULT false,
    -- Deliveries returned unacknowledged since the last counted one.
    unacked_returns       integer NOT NULL DEFAULT 0,
    progress              jsonb,
    result                jsonb,
    errors                jsonb NOT NULL DEFAULT '[]',
    created_at            timestamptz NOT NULL DEFAULT now(),
    started_at            timestamptz,
    finished_at           timestamptz,
    updated_at            timestamptz NOT NULL DEFAULT now()
);

-- The claim: one queue, waiting jobs, highest priority then oldest due time.
-- Only waiting rows are in it, so it stays small however many jobs finished.
CREATE INDEX jobs_waiting ON jobs (queue, priority DESC, run_at, seq)
    WHERE status IN ('queued', 'scheduled', 'retrying');

-- Jobs a worker holds (heartbeat lease extension, re-queue on death).
CREATE INDEX jobs_running_worker ON jobs (worker_id) WHERE status = 'running';

-- Unacknowledged deliveries and expired leases, for the watchdog.
CREATE INDEX jobs_running_ack ON jobs (ack_deadline) WHERE status = 'running' AND ack_deadline IS NOT NULL;
CREATE INDEX jobs_running_lease ON jobs (lease_expires_at) WHERE status = 'running';
CREATE INDEX jobs_running_deadline ON jobs (deadline_at) WHERE status = 'running';

-- A unique_key is held while its job is not finished.
CREATE UNIQUE INDEX jobs_unique_key ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('queued', 'scheduled', 'running', 'retrying');

-- JOB.LIST pages by id within optional filters; retention scans finished jobs by age.
CREATE INDEX jobs_queue_status ON jobs (queue, status, id);
CREATE INDEX jobs_finished ON jobs (status, finished_at) WHERE status IN ('completed', 'failed', 'cancelled');
