package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ThroughPooler reports whether connString leads to a connection pooler
// (PgBouncer and its kind) rather than to PostgreSQL itself. A pooler
// answers the startup with a backend key of its own, which it needs to
// route cancel requests, so the process id the connection was given is not
// the one of the server process that runs its statements.
func ThroughPooler(ctx context.Context, connString string) (bool, error) {
	cc, err := pgx.ParseConfig(connString)
	if err != nil {
		return false, fmt.Errorf("parsing database url: %w", err)
	}
	// Only parameters every pooler passes on: PgBouncer refuses a startup
	// naming one it does not know.
	cc.RuntimeParams["application_name"] = "agq"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return false, fmt.Errorf("connecting to database: %w", err)
	}
	defer conn.Close(context.Background())
	var pid uint32
	// The simple protocol leaves no prepared statement behind on a server
	// connection that others will share.
	err = conn.QueryRow(ctx, `SELECT pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&pid)
	if err != nil {
		return false, fmt.Errorf("asking for the backend's process id: %w", err)
	}
	return conn.PgConn().PID() != pid, nil
}

// execModeChosen reports whether connString says how statements are sent
// (pgx's default_query_exec_mode), which then beats agq's choice.
func execModeChosen(connString string) bool {
	cc, err := pgconn.ParseConfig(connString)
	if err != nil {
		return false
	}
	_, ok := cc.RuntimeParams["default_query_exec_mode"]
	return ok
}
