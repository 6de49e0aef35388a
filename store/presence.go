package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// PresenceChange is a worker principal's connections on one node changing:
// its first one opened (Gone false), or its last one closed, Ago before
// the statement runs.
type PresenceChange struct {
	Principal string
	Gone      bool
	Ago       time.Duration
}

// NodeSeen records that node id runs and writes its changes, in one
// transaction: a reader that sees the node seen at some time sees every
// change it knew of then. Fresh means the node had no row (its first call,
// or the leader forgot it after a long silence): all its principals are to
// be written again. The commit does not wait for the WAL flush: a crash
// that loses it stops the node too.
func (s *Store) NodeSeen(ctx context.Context, nodeID string, changes []PresenceChange) (fresh bool, err error) {
	principals := make([]string, len(changes))
	ago := make([]*float64, len(changes))
	for i, c := range changes {
		principals[i] = c.Principal
		if c.Gone {
			secs := c.Ago.Seconds()
			ago[i] = &secs
		}
	}
	err = s.asyncCommit(ctx, func(tx pgx.Tx) error {
		// xmax is 0 on a row this statement inserted.
		if err := tx.QueryRow(ctx, `
			INSERT INTO agq_nodes (node_id) VALUES ($1)
			ON CONFLICT (node_id) DO UPDATE SET seen_at = now()
			RETURNING xmax = 0`, nodeID).Scan(&fresh); err != nil {
			return err
		}
		if len(changes) == 0 {
			return nil
		}
		// By the key.
		_, err := tx.Exec(ctx, `
			INSERT INTO worker_connections (principal, node_id, gone_at)
			SELECT p, $1, now() - make_interval(secs => ago)
			FROM unnest($2::text[], $3::float8[]) AS c(p, ago)
			ON CONFLICT (principal, node_id) DO UPDATE SET gone_at = excluded.gone_at`, nodeID, principals, ago)
		return err
	})
	return fresh, interpretError(err)
}

// NodeLeave forgets node id and its rows: it stops, and the connections
// it closes on its way out are not the workers' doing.
func (s *Store) NodeLeave(ctx context.Context, nodeID string) error {
	_, err := s.Pool.Exec(ctx, `
		WITH n AS (DELETE FROM agq_nodes WHERE node_id = $1)
		DELETE FROM worker_connections WHERE node_id = $1`, nodeID)
	return interpretError(err)
}

// NodesForget deletes the nodes silent for longer than silence (they died
// without leaving), with their rows, and answers how many.
func (s *Store) NodesForget(ctx context.Context, silence time.Duration) (int, error) {
	var n int
	err := s.Pool.QueryRow(ctx, `
		WITH gone AS (DELETE FROM agq_nodes WHERE seen_at < now() - $1::interval RETURNING node_id),
		rows AS (DELETE FROM worker_connections c USING gone WHERE c.node_id = gone.node_id)
		SELECT count(*) FROM gone`, silence).Scan(&n)
	return n, interpretError(err)
}

// GoneParams say when a worker whose connections closed is lost.
type GoneParams struct {
	// After is how long none of its connections may be left.
	After time.Duration
	// Grace is how long after a node's start a connection it lost does
	// not count (workers coming back from a restart may lose one).
	Grace time.Duration
	// NodeSilence is how long a node may go unseen and still be up.
	NodeSilence time.Duration
	Limit       int
}

// WorkersMarkGone makes DEAD the live workers of principals none of whose
// connections is left, for p.After, on any node that is up, as
// WorkersMarkDead does for silent ones, and answers their ids. Only rows
// of nodes up and past their grace count, and a row counts only once its
// node was seen p.After past its time: the node had written by then any
// connection that came back. A row of a node that died (or stopped) or
// was starting counts for nothing: those are left to the heartbeats.
func (s *Store) WorkersMarkGone(ctx context.Context, p GoneParams) ([]string, error) {
	var dead []deadWorker
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		// Principals through worker_connections_gone, then their rows and
		// workers: by the key and workers_live_principal, or, while the
		// tables are small (a row per live worker and node), read whole.
		rows, err := tx.Query(ctx, `
			WITH up AS (
				SELECT node_id, started_at, seen_at FROM agq_nodes WHERE seen_at > now() - $3::interval
			), lost AS (
				SELECT c.principal
				FROM (SELECT DISTINCT principal FROM worker_connections WHERE gone_at < now() - $1::interval) g
				JOIN worker_connections c ON c.principal = g.principal
				JOIN up ON up.node_id = c.node_id
				WHERE c.gone_at IS NULL OR c.gone_at >= up.started_at + $2::interval
				GROUP BY c.principal
				HAVING bool_and(coalesce(c.gone_at < now() - $1::interval AND up.seen_at >= c.gone_at + $1::interval, false))
				LIMIT $4
			), forgot AS (
				DELETE FROM worker_connections c USING lost WHERE c.principal = lost.principal
			)
			UPDATE workers w SET state = 'DEAD', state_changed_at = now()
			FROM lost WHERE w.principal = lost.principal AND w.state IN ('ACTIVE', 'DRAINING')
			RETURNING w.worker_id, w.namespace`, p.After, p.Grace, p.NodeSilence, p.Limit)
		if err != nil {
			return err
		}
		if dead, err = collectDead(rows); err != nil {
			return err
		}
		// Rows of principals with no live worker (it unregistered or
		// died since) tell nothing any more.
		if _, err := tx.Exec(ctx, `
			DELETE FROM worker_connections c WHERE c.gone_at < now() - $1::interval
			  AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.principal = c.principal AND w.state IN ('ACTIVE', 'DRAINING'))`,
			p.After); err != nil {
			return err
		}
		return s.declaredDead(ctx, tx, dead)
	})
	return idsOf(dead), interpretError(err)
}
