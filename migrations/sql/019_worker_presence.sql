-- Workers found gone in seconds: a worker none of whose connections is
-- left, and that did not come back within AGQ_WORKER_GONE_AFTER, is lost as
-- after missed heartbeats; but only while the node that held those
-- connections is up and past its start-up grace.

-- The nodes that run, each seen every second while it does. A node that
-- stops deletes its row; one that died is silent, and its rows are
-- forgotten after a while.
CREATE TABLE agq_nodes (
    node_id    text PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now()
);

-- Per worker principal and node: gone_at is NULL while the node holds a
-- connection authenticated as the principal, else when its last one
-- closed. The leader looks at the rows gone long enough
-- (worker_connections_gone), then at all rows of their principals (the
-- key); a stopping node deletes its own (worker_connections_node).
CREATE TABLE worker_connections (
    principal text NOT NULL,
    node_id   text NOT NULL,
    gone_at   timestamptz,
    PRIMARY KEY (principal, node_id)
);
CREATE INDEX worker_connections_gone ON worker_connections (gone_at) WHERE gone_at IS NOT NULL;
CREATE INDEX worker_connections_node ON worker_connections (node_id);
