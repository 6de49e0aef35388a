package pgcluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// defaultStartTimeout applies when Start's context has no deadline.
	defaultStartTimeout = 60 * time.Second
	readyPollInterval   = 50 * time.Millisecond
	logTailLines        = 20
	logTailMaxBytes     = 16 << 10
)

// waitReady polls with real connections, since a listening socket does not
// mean that recovery has finished. It gives up early if postgres exits.
func (c *Cluster) waitReady(ctx context.Context, pm *postmaster) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}
	connString := c.ConnString("postgres")
	ticker := time.NewTicker(readyPollInterval)
	defer ticker.Stop()
	for {
		conn, err := pgconn.Connect(ctx, connString)
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-pm.exited:
			return fmt.Errorf("postgres exited during start-up (%s)", exitStatus(pm.waitErr))
		case <-ctx.Done():
			return fmt.Errorf("postgres not ready: %w; last attempt: %v", ctx.Err(), err)
		case <-ticker.C:
		}
	}
}

// logTail returns the last lines postgres wrote to path since offset.
func logTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	offset = min(max(offset, info.Size()-logTailMaxBytes), info.Size())
	data, err := io.ReadAll(io.NewSectionReader(f, offset, info.Size()-offset))
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}
