// Package api is the job engine as its callers see it: the Engine and
// Reads interfaces that commands and the dashboard call, and the Wait a
// blocked command hands the engine. Its records are package records'.
package api
