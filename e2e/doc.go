// Package e2e holds agq's end-to-end tests; it has no code of its own
// besides this comment.
//
// The tests build the real agw binary once (go build, with -race when the
// tests run with it) and run it as a subprocess against in-process agq
// nodes on the managed test PostgreSQL (internal/agqtest), configured only
// through its environment (AGQ_ADDR, AGQ_WORKER_ID, AGQ_KEY, AGW_TOOLS,
// AGW_CONCURRENCY, AGW_SHUTDOWN_TIMEOUT), with its log copied into the test
// log. Jobs are submitted and read with the real redis-cli and go-redis.
// They cover what BRIEF §6b asks agw to show: a pipeline's exact result,
// refusals, timeouts and cancellations that kill whole process groups,
// draining on SIGTERM, and surviving a restart of agq. They also run the
// documentation as printed: the commands of docs/quickstart.md, and the
// go-redis workers, the Python workers and the shell scripts of
// docs/cookbook.md, and the first worker and producer of docs/python.md.
// python_test.go runs the Python package's own tests (python/tests) with
// Debian's /usr/bin/python3 against an in-process agq.
//
// The tests look for left-over processes in /proc, so they run on Linux.
package e2e
