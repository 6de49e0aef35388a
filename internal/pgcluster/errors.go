package pgcluster

import (
	"errors"
	"fmt"
)

// Sentinel errors returned (wrapped with context) by this package.
var (
	// ErrNoBinaries means initdb and postgres could not be found.
	ErrNoBinaries = errors.New("PostgreSQL server binaries not found")
	// ErrDataDirInUse means another agq process holds the data dir's lock.
	ErrDataDirInUse = errors.New("data dir is in use by another agq process")
	// ErrNoPostgresUser means agq runs as root but there is no postgres
	// system user to run PostgreSQL as.
	ErrNoPostgresUser = errors.New("system user postgres not found")
)

// dataDirInUseError names the data dir and the holder's pid, and matches
// ErrDataDirInUse with errors.Is.
type dataDirInUseError struct {
	dataDir string
	pid     string
}

func (e *dataDirInUseError) Error() string {
	return fmt.Sprintf("data dir %s is in use by another agq process (pid %s)", e.dataDir, e.pid)
}

func (e *dataDirInUseError) Unwrap() error { return ErrDataDirInUse }
