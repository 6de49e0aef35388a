//go:build !linux

package stats

import "errors"

func diskAvailable(string) (uint64, error) {
	return 0, errors.New("free disk space is only sampled on Linux")
}
