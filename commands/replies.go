package commands

import (
	"errors"

	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// jsonOrNil answers a record looked up by name (JOB.GET, WORKER.GET,
// SCHEDULE.GET): its JSON, or nil when there is none.
func jsonOrNil[T any](v T, err error, encode func(T) []byte) (resp.Reply, error) {
	if errors.Is(err, records.ErrNotFound) {
		return resp.Nil, nil
	}
	if err != nil {
		return nil, err
	}
	return resp.Bulk(encode(v)), nil
}

// okOr answers OK, or err.
func okOr(err error) (resp.Reply, error) {
	if err != nil {
		return nil, err
	}
	return resp.OK, nil
}
