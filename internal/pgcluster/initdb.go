package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// superuser is the role initdb creates and agq connects as.
const superuser = "agq"

// initCluster runs initdb unless the cluster dir holds a PG_VERSION. initdb
// writes PG_VERSION early, so a killed initdb could leave a cluster that
// looks complete; it therefore works in a scratch dir that is renamed into
// place only after it succeeds.
func (c *Cluster) initCluster(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(c.clusterDir, "PG_VERSION")); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checking cluster: %w", err)
	}
	scratch := c.clusterDir + ".initdb"
	for _, dir := range []string{c.clusterDir, scratch} {
		// Half-initialised leftovers of an earlier run.
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("removing incomplete cluster: %w", err)
		}
	}
	if err := ensurePrivateDir(scratch, c.runAs); err != nil {
		return err
	}

	if c.primary != nil {
		if err := c.baseBackup(ctx, scratch); err != nil {
			return err
		}
		return os.Rename(scratch, c.clusterDir)
	}
	c.log.Info().Str("cluster_dir", c.clusterDir).Msg("creating PostgreSQL cluster")
	args := []string{
		"-D", scratch,
		// Only the socket dir's owner (and root) can reach the socket.
		"--auth=trust",
		"--username=" + superuser,
		"--encoding=UTF8",
		"--locale=C",
	}
	if c.settings["fsync"] == "off" {
		// Whoever turns fsync off does not want initdb's sync either.
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, "initdb"), args...)
	cmd.Dir = scratch
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.runAs.credential()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb failed: %w; its output:\n%s", err, strings.TrimSpace(string(out)))
	}
	c.log.Debug().Str("output", string(out)).Msg("initdb finished")
	if err := os.Rename(scratch, c.clusterDir); err != nil {
		return fmt.Errorf("moving new cluster into place: %w", err)
	}
	return nil
}
