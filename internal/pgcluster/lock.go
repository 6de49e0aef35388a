package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

const lockFileName = "agq.lock"

// dirLock is an exclusive flock on <DataDir>/agq.lock. The kernel drops it
// when the process dies, so a crashed agq never leaves the data dir locked.
type dirLock struct {
	file     *os.File
	released atomic.Bool
}

// lockDataDir takes the lock without waiting and records our pid in the
// file so that a second agq can say who holds it.
func lockDataDir(dataDir string) (*dirLock, error) {
	path := filepath.Join(dataDir, lockFileName)
	// os.OpenFile sets O_CLOEXEC, so postgres never inherits (and never
	// keeps holding) the lock.
	file, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	if err := syscall.Flock(int(file.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		file.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &dataDirInUseError{dataDir: dataDir, pid: lockHolder(path)}
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if err := writePid(file); err != nil {
		file.Close()
		return nil, fmt.Errorf("writing pid to %s: %w", path, err)
	}
	return &dirLock{file: file}, nil
}

func writePid(file *os.File) error {
	if err := file.Truncate(0); err != nil {
		return err
	}
	_, err := file.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

// lockHolder reads the holder's pid; the holder may be between truncating
// and writing it, hence the fallback.
func lockHolder(path string) string {
	data, err := os.ReadFile(path)
	pid := strings.TrimSpace(string(data))
	if err != nil || pid == "" {
		return "unknown"
	}
	return pid
}

// held reports whether the lock was not released.
func (l *dirLock) held() bool { return !l.released.Load() }

// release closes the file, which drops the flock. It is safe to call twice.
func (l *dirLock) release() error {
	l.released.Store(true)
	if l.file == nil {
		return nil
	}
	err := l.file.Close()
	l.file = nil
	return err
}
