-- Principals are the identities that may connect: admins, workers and
-- producers. Keys are stored only as SHA-256 digests.
CREATE TABLE principals (
    name        text PRIMARY KEY,
    role        text NOT NULL CHECK (role IN ('admin', 'worker', 'producer')),
    key_digest  bytea NOT NULL CHECK (length(key_digest) = 32),
    source      text NOT NULL DEFAULT 'minted' CHECK (source IN ('minted', 'generated')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

-- AUTH <key> finds the principal by digest; only live keys matter.
CREATE UNIQUE INDEX principals_live_digest ON principals (key_digest) WHERE revoked_at IS NULL;
