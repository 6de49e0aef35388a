-- Namespaces: each tenant's jobs, queues, types, schedules, workers and
-- keys. The namespace leads every key and every hot index, so that each
-- statement names one namespace (and could be sent to the one node that
-- would hold it). Rows stored before live in 'default'.
CREATE TABLE namespaces (
    name text PRIMARY KEY,
    max_unfinished bigint CHECK (max_unfinished > 0),
    submit_rate integer CHECK (submit_rate > 0),
    submit_period integer CHECK (submit_period > 0),
    max_running integer CHECK (max_running > 0),
    retain_completed interval,
    retain_failed interval,
    -- Set by NAMESPACE.DELETE: the namespace takes nothing more while its
    -- rows are deleted, batch by batch; the row goes last.
    deleting boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT namespaces_rate_whole CHECK ((submit_rate IS NULL) = (submit_period IS NULL))
);
INSERT INTO namespaces (name) VALUES ('default');

-- A key's namespace; NULL for the admin and viewer keys that span them all.
ALTER TABLE principals ADD COLUMN namespace text;
UPDATE principals SET namespace = 'default' WHERE role NOT IN ('admin', 'viewer');

ALTER TABLE job_logs DROP CONSTRAINT job_logs_job_id_fkey;
ALTER TABLE job_signals DROP CONSTRAINT job_signals_job_id_fkey;
ALTER TABLE job_steps DROP CONSTRAINT job_steps_job_id_fkey;

ALTER TABLE jobs ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE jobs DROP CONSTRAINT jobs_pkey;
ALTER TABLE jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (namespace, id);

DROP INDEX jobs_queue_status;
CREATE INDEX jobs_queue_status ON jobs (namespace, queue, status, id);
DROP INDEX jobs_unique_key;
CREATE UNIQUE INDEX jobs_unique_key ON jobs (namespace, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('pending', 'queued', 'scheduled', 'running', 'retrying', 'awaiting');
DROP INDEX jobs_unplaced;
CREATE INDEX jobs_unplaced ON jobs (namespace, queue, run_at, seq)
    WHERE status IN ('queued', 'scheduled', 'retrying') AND fair_pass IS NULL;
DROP INDEX jobs_waiting;
CREATE INDEX jobs_waiting ON jobs (namespace, queue, priority DESC, fair_pass, run_at, seq)
    WHERE status IN ('queued', 'scheduled', 'retrying');
DROP INDEX jobs_fair_tail;
CREATE INDEX jobs_fair_tail ON jobs (namespace, fair_key, queue, priority, fair_pass)
    WHERE status IN ('queued', 'scheduled', 'retrying') AND fair_pass > 0;
DROP INDEX jobs_finished;
CREATE INDEX jobs_finished ON jobs (namespace, status, finished_at)
    WHERE status IN ('completed', 'failed', 'cancelled');
DROP INDEX jobs_cancelled_by;
CREATE INDEX jobs_cancelled_by ON jobs (namespace, cancelled_by, status) WHERE cancelled_by IS NOT NULL;
-- Unfinished jobs by namespace and status: the MAXUNFINISHED count
-- (index-only), NAMESPACE.DELETE's check, a namespace's running jobs. On
-- the namespace alone it would be a trap for the planner: in a namespace
-- holding nearly every row its heap order makes a walk of every unfinished
-- job look cheaper than jobs_waiting's probe of one queue (LLEN), or than
-- counting the running jobs alone (a claim under a type limit).
CREATE INDEX jobs_unfinished ON jobs (namespace, status)
    WHERE status IN ('pending', 'queued', 'scheduled', 'running', 'retrying', 'awaiting');

ALTER TABLE job_steps ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE job_steps DROP CONSTRAINT job_steps_order;
ALTER TABLE job_steps ADD CONSTRAINT job_steps_order PRIMARY KEY (namespace, job_id, ord);
DROP INDEX job_steps_live;
CREATE UNIQUE INDEX job_steps_live ON job_steps (namespace, job_id, step_id) WHERE status <> 'replaced';
DROP INDEX job_steps_open;
CREATE INDEX job_steps_open ON job_steps (namespace, job_id) WHERE status = 'running';
DROP INDEX job_steps_awaiting;
CREATE INDEX job_steps_awaiting ON job_steps (namespace, job_id) WHERE status = 'awaiting';
ALTER TABLE job_steps ADD CONSTRAINT job_steps_job_fkey
    FOREIGN KEY (namespace, job_id) REFERENCES jobs (namespace, id) ON DELETE CASCADE;

ALTER TABLE job_logs ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE job_logs DROP CONSTRAINT job_logs_pkey;
ALTER TABLE job_logs ADD CONSTRAINT job_logs_pkey PRIMARY KEY (namespace, job_id, attempt, seq);
ALTER TABLE job_logs ADD CONSTRAINT job_logs_job_fkey
    FOREIGN KEY (namespace, job_id) REFERENCES jobs (namespace, id) ON DELETE CASCADE;

ALTER TABLE job_signals ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE job_signals DROP CONSTRAINT job_signals_pkey;
ALTER TABLE job_signals ADD CONSTRAINT job_signals_pkey PRIMARY KEY (namespace, job_id, seq);
DROP INDEX job_signals_token;
CREATE UNIQUE INDEX job_signals_token ON job_signals (namespace, job_id, token) WHERE token IS NOT NULL;
DROP INDEX job_signals_untaken;
CREATE INDEX job_signals_untaken ON job_signals (namespace, job_id, name, seq) WHERE taken_by IS NULL;
ALTER TABLE job_signals ADD CONSTRAINT job_signals_job_fkey
    FOREIGN KEY (namespace, job_id) REFERENCES jobs (namespace, id) ON DELETE CASCADE;

ALTER TABLE job_waits ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE job_waits DROP CONSTRAINT job_waits_pkey;
ALTER TABLE job_waits ADD CONSTRAINT job_waits_pkey PRIMARY KEY (namespace, parent_id, child_id);
DROP INDEX job_waits_child;
CREATE INDEX job_waits_child ON job_waits (namespace, child_id);

ALTER TABLE graph_walks ADD COLUMN namespace text NOT NULL DEFAULT 'default';
DROP INDEX graph_walks_job;
CREATE INDEX graph_walks_job ON graph_walks (namespace, job_id);

ALTER TABLE dependency_checks ADD COLUMN namespace text NOT NULL DEFAULT 'default';
DROP INDEX dependency_checks_job;
CREATE INDEX dependency_checks_job ON dependency_checks (namespace, job_id);

ALTER TABLE queues ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE queues DROP CONSTRAINT queues_pkey;
ALTER TABLE queues ADD CONSTRAINT queues_pkey PRIMARY KEY (namespace, name);

ALTER TABLE job_types ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE job_types DROP CONSTRAINT job_types_pkey;
ALTER TABLE job_types ADD CONSTRAINT job_types_pkey PRIMARY KEY (namespace, name);

ALTER TABLE schedules ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE schedules DROP CONSTRAINT schedules_pkey;
ALTER TABLE schedules ADD CONSTRAINT schedules_pkey PRIMARY KEY (namespace, name);

-- Worker ids are principals, unique across namespaces: the namespace is
-- what a worker pops from and where WORKER.LIST shows it.
ALTER TABLE workers ADD COLUMN namespace text NOT NULL DEFAULT 'default';
CREATE INDEX workers_namespace ON workers (namespace, worker_id);

-- quotas: submissions per namespace and second, for SUBMITRATE's sliding
-- window (across nodes) and NAMESPACE.CONFIG's submitted_last_minute. Only
-- namespaces with a quota write it; rows older than a day are swept.
CREATE TABLE namespace_submissions (
    namespace text NOT NULL,
    second bigint NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (namespace, second)
);

-- graph:
-- A parent's end is marked in its own namespace: the children that named
-- it there are the ones settled.
CREATE OR REPLACE FUNCTION agq_mark_parent_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO dependency_checks (namespace, job_id) VALUES (NEW.namespace, NEW.id);
    RETURN NULL;
END $$;
