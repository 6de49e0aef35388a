// Package api is the job engine as its callers see it: the records they
// read and write, the engine's rules that are plain values (statuses,
// limits), the refusals the wire layer and the dashboard word, and the
// Engine interface they call. It imports neither store nor pgx, so that
// commands and the dashboard depend on the engine's contract alone; the
// engine (package engine) implements Engine and converts the store's
// records to these at its edge.
package api
