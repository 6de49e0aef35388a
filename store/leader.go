package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// LeaderRecord notes which node leads, for INFO and /metrics on every node.
func LeaderRecord(ctx context.Context, conn *pgx.Conn, nodeID string) error {
	_, err := conn.Exec(ctx, `
		INSERT INTO agq_leader (id, node_id, since) VALUES (1, $1, now())
		ON CONFLICT (id) DO UPDATE SET node_id = excluded.node_id, since = excluded.since`, nodeID)
	return interpretError(err)
}

// Leader returns the node that took leadership last and since when.
func (s *Store) Leader(ctx context.Context) (string, time.Time, error) {
	var node string
	var since time.Time
	err := s.Pool.QueryRow(ctx, `SELECT node_id, since FROM agq_leader WHERE id = 1`).Scan(&node, &since)
	return node, since, interpretError(err)
}
