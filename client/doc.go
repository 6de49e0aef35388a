// Package client is a Go library for agq's workers and producers, over
// plain RESP with go-redis.
//
// A Worker registers, heartbeats, and keeps its slots full with pops that
// each take jobs for many slots (COUNT <free slots>, up to half of them):
// a BLMPOP that waits for work, and while a backlog lasts an LMPOP beside
// it, so that agq claims the next jobs while the last claim is answered. A
// slot frees when its handler returns, and the final reports of many slots
// go on in pipelines (retried until agq answers) while the pops go out. It acknowledges a delivery
// only when its job runs long enough to need it, or when the handler asks
// (Job.Acknowledge). A handler's ctx ends on the job's timeout, on its
// cancellation and on shutdown. Step and Job.Sleep use agq's durable steps,
// so that a job delivered again resumes after its last completed step; a
// step's completion goes with the job's next call (the next step's begin,
// or the final report), and the slots' step calls go out in pipelines.
//
// A Producer submits jobs (one, or a batch or graph in one round trip),
// reads, waits for, cancels, retries and follows them.
//
// The package imports go-redis and the standard library only: a program
// that uses it compiles nothing of the agq server.
package client
