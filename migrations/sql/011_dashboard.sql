-- The viewer role reads everything and changes nothing: the dashboard's
-- read-only sign-in, and a read-only key for redis-cli.
ALTER TABLE principals DROP CONSTRAINT principals_role_check;
ALTER TABLE principals ADD CONSTRAINT principals_role_check
    CHECK (role IN ('admin', 'worker', 'producer', 'viewer'));

-- The key the dashboard signs its session cookies with. It is kept in the
-- database, not per process, so that a session signed by one node is
-- honoured by every node behind the same load balancer.
CREATE TABLE dashboard_secret (
    id     integer PRIMARY KEY CHECK (id = 1),
    secret bytea NOT NULL CHECK (length(secret) >= 32)
);
