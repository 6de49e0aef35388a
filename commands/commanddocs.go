package commands

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agq/agq/resp"
)

// commandDoc is what COMMAND DOCS, COMMAND INFO and redis-cli's HELP say
// of a command. Its syntax is the docs/protocol heading of the command,
// after the name (a test holds the two together).
type commandDoc struct {
	group, syntax, summary string
	// keys are the key arguments, as COMMAND INFO gives them; none when
	// zero.
	keys  keySpec
	write bool
	// refused: a Redis write agq answers with an error, documented together
	// under "Writes are refused".
	refused bool
}

// keySpec is the first and last key argument and the step between keys
// (last -1: to the end; -2: all but the last).
type keySpec struct{ first, last, step int }

var (
	firstKey    = keySpec{1, 1, 1}  // the first argument, alone
	everyKey    = keySpec{1, -1, 1} // every argument
	keysButLast = keySpec{1, -2, 1} // every argument but the last (a timeout)
)

// docsByName lists the docs of groups by command name, each with its group.
func docsByName(groups map[string]map[string]commandDoc) map[string]commandDoc {
	docs := map[string]commandDoc{}
	for group, ofGroup := range groups {
		for name, d := range ofGroup {
			if _, twice := docs[name]; twice {
				panic("command " + name + " is documented in two groups")
			}
			d.group = group
			docs[name] = d
		}
	}
	return docs
}

// refusedDoc is the doc of each of refusedWrites.
var refusedDoc = commandDoc{group: groupKeyspace, syntax: "[argument …]", write: true, refused: true,
	summary: "Refused: agq's keys are read-only; submit and change jobs with the JOB.* commands."}

// The groups are the pages of docs/protocol.
const (
	groupConnection = "connection"
	groupJobs       = "jobs"
	groupKeys       = "keys"
	groupNamespaces = "namespaces"
	groupKeyspace   = "keyspace"
	groupQueues     = "queues"
	groupSchedules  = "schedules"
	groupWorkers    = "workers"
	groupPubSub     = "pubsub"
	groupWorkflows  = "workflows"
)

// commandDocs are the docs of every command, by name, written a group at
// a time.
var commandDocs = docsByName(map[string]map[string]commandDoc{
	groupConnection: {
		"auth":    {syntax: "[principal] key", summary: "Authenticates the connection with a key, as a principal."},
		"hello":   {syntax: "[protover [AUTH principal key] [SETNAME name]]", summary: "Chooses the protocol version (2 or 3), optionally authenticating and naming the connection."},
		"ping":    {syntax: "[message]", summary: "Checks that the connection and the server are alive."},
		"echo":    {syntax: "message", summary: "Answers its argument."},
		"quit":    {syntax: "", summary: "Closes the connection."},
		"select":  {syntax: "index", summary: "Chooses database 0, agq's only keyspace."},
		"client":  {syntax: "subcommand [argument …]", summary: "Connection settings and introspection: SETNAME, GETNAME, ID, SETINFO, INFO, LIST, HELP."},
		"command": {syntax: "[COUNT | LIST | INFO name … | DOCS [name …] | HELP]", summary: "Describes the commands agq knows, in Redis 7's shapes."},
		"info":    {syntax: "[section …]", summary: "Server information: server, clients, leader, queues, workers, jobs."},
		"time":    {syntax: "", summary: "The server's clock."},
	},
	groupJobs: {
		"job.submit": {syntax: "json", summary: "Submits a job (a JSON object) or an atomic batch (a JSON array); answers the job ids.", write: true},
		"lpush":      {syntax: "queue:<name> json [json …]", summary: "Submits jobs to the queue the key names, as JOB.SUBMIT would.", keys: firstKey, write: true},
		"brpop":      {syntax: "queue:<name> [queue:<name> …] timeout", summary: "Takes the next job a worker can run from the queues, waiting up to timeout seconds (0: forever).", keys: keysButLast, write: true},
		"rpop":       {syntax: "queue:<name> [count]", summary: "Takes the next job (or up to count) a worker can run from the queue, without waiting.", keys: firstKey, write: true},
		"blmpop":     {syntax: "timeout numkeys queue:<name> [queue:<name> …] RIGHT [COUNT count]", summary: "Takes up to count jobs a worker can run from the first of the queues that has any, waiting up to timeout seconds (0: forever).", write: true},
		"lmpop":      {syntax: "numkeys queue:<name> [queue:<name> …] RIGHT [COUNT count]", summary: "Takes up to count jobs a worker can run from the first of the queues that has any, without waiting.", write: true},
		"job.update": {syntax: "job_id json", summary: "Reports on a job the worker holds: running, progress, completed, failed or cancelled.", write: true},
		"job.get":    {syntax: "job_id", summary: "The job as JSON."},
		"job.wait":   {syntax: "job_id timeout", summary: "Waits until the job is completed, failed or cancelled, up to timeout seconds (0: forever)."},
		"job.list":   {syntax: "[QUEUE q] [STATUS s] [TYPE t] [LIMIT n] [CURSOR c]", summary: "Pages through jobs by id, like SCAN."},
		"job.cancel": {syntax: "job_id [CASCADE]", summary: "Cancels a job: at once if it waits, through its worker if it runs; CASCADE, every unended job after it too.", write: true},
		"job.retry":  {syntax: "job_id [FROM step_id]", summary: "Queues a failed or cancelled job again with a fresh set of attempts; FROM runs an ended job again from one of its steps.", write: true},
		"job.logs":   {syntax: "job_id [attempt]", summary: "The log lines a job's worker published for an attempt (the last by default)."},
	},
	groupWorkflows: {
		"step.begin":    {syntax: "job_id step_id [json] [DELIVERY token]", summary: "Begins a durable step of a job the worker holds, or answers its output from an earlier delivery.", write: true},
		"step.complete": {syntax: "job_id step_id [output_json] [NEXT step_id [json]] [DELIVERY token]", summary: "Keeps the output of a step the worker began, and with NEXT begins the next.", write: true},
		"step.fail":     {syntax: "job_id step_id error_json [DELIVERY token]", summary: "Fails the open step: the job retries at the step's backoff, or fails.", write: true},
		"step.sleep":    {syntax: "job_id step_id seconds [DELIVERY token]", summary: "Puts the job to sleep durably; in a later delivery the same call answers OK.", write: true},
		"step.wait":     {syntax: "job_id step_id (SIGNAL name | JOBS id [id …]) [TIMEOUT seconds] [DELIVERY token]", summary: "Waits durably for a signal or for other jobs to end; in the delivery after the wait ended the same call answers its output.", write: true},
		"job.signal":    {syntax: "job_id name json [ID token]", summary: "Stores a signal for a job, once per ID; it ends the job's wait for it.", write: true},
		"job.steps":     {syntax: "job_id [CURSOR c] [LIMIT n]", summary: "The job's steps, in the order first begun, as a JSON array."},
		"job.parents":   {syntax: "job_id [CURSOR cursor]", summary: "A page of the parents of a job its worker holds, with their statuses and results."},
		"job.children":  {syntax: "job_id [CURSOR cursor] [LIMIT n]", summary: "A page of the jobs after a job, with their statuses."},
	},
	groupKeys: {
		"key.create": {syntax: "role principal [NAMESPACE name]", summary: "Mints a key for a principal with a role (admin, worker, producer, viewer), in a namespace, and answers it, once.", write: true},
		"key.revoke": {syntax: "principal", summary: "Revokes the principal's key; its connections lose their authentication.", write: true},
		"key.list":   {syntax: "", summary: "Lists the principals that have a valid key, with their roles."},
	},
	groupNamespaces: {
		"namespace":        {syntax: "[name]", summary: "Answers the connection's namespace, or moves a cluster key's connection to another."},
		"namespace.create": {syntax: "name", summary: "Creates a namespace: its own jobs, queues, workers, schedules and keys.", write: true},
		"namespace.list":   {syntax: "", summary: "The namespaces, by name."},
		"namespace.delete": {syntax: "name", summary: "Deletes a namespace without unfinished jobs, with everything it holds.", write: true},
		"namespace.config": {syntax: "name [MAXUNFINISHED n] [SUBMITRATE n PER seconds] [MAXRUNNING n] [RETAINCOMPLETED seconds] [RETAINFAILED seconds]", summary: "Reads or sets a namespace's quotas and retention (NONE removes one), with its counts.", write: true},
	},
	groupKeyspace: {
		"keys":     {syntax: "pattern", summary: "The keys matching a glob pattern, sorted."},
		"scan":     {syntax: "cursor [MATCH pattern] [COUNT count] [TYPE type]", summary: "Walks the keyspace a page at a time."},
		"dbsize":   {syntax: "", summary: "The number of keys."},
		"get":      {syntax: "key", summary: "A string key's value.", keys: firstKey},
		"strlen":   {syntax: "key", summary: "The length of a string key's value.", keys: firstKey},
		"ttl":      {syntax: "key", summary: "The seconds a key has left.", keys: firstKey},
		"pttl":     {syntax: "key", summary: "The milliseconds a key has left.", keys: firstKey},
		"exists":   {syntax: "key [key …]", summary: "How many of the keys exist.", keys: everyKey},
		"type":     {syntax: "key", summary: "A key's type: string, list, set or none.", keys: firstKey},
		"smembers": {syntax: "key", summary: "The members of a set key, sorted.", keys: firstKey},
		"scard":    {syntax: "key", summary: "The number of members of a set key.", keys: firstKey},
	},
	groupQueues: {
		"llen":         {syntax: "queue:<name>", summary: "The number of jobs of the queue claimable now.", keys: firstKey},
		"lrange":       {syntax: "queue:<name> start stop", summary: "Peeks at the queue's claimable jobs, in delivery order, without taking them.", keys: firstKey},
		"queue.list":   {syntax: "", summary: "The names of all queues."},
		"queue.stats":  {syntax: "[name]", summary: "A queue's counts by status, or every queue's."},
		"queue.pause":  {syntax: "name", summary: "Stops pops from the queue until it is resumed.", write: true},
		"queue.resume": {syntax: "name", summary: "Resumes a paused queue.", write: true},
		"queue.config": {syntax: "name [MAXRUNNING n] [RATE n PER seconds] [MAXRUNNINGPERKEY n]", summary: "Reads or sets a queue's limits: running jobs at once, starts per period, running jobs per fair key (NONE removes one).", write: true},
		"queue.info":   {syntax: "name", summary: "A queue's counts by status and its limits."},
		"type.config":  {syntax: "type [MAXRUNNING n] [RATE n PER seconds]", summary: "Reads or sets a job type's limits across every queue: running jobs at once, starts per period.", write: true},
	},
	groupSchedules: {
		"schedule.create":  {syntax: "json", summary: "Creates a cron schedule that submits a job at each fire.", write: true},
		"schedule.get":     {syntax: "name", summary: "The schedule as JSON: definition, next and last fire, counts."},
		"schedule.list":    {syntax: "", summary: "Every schedule, by name."},
		"schedule.update":  {syntax: "name json", summary: "Changes the fields given of a schedule.", write: true},
		"schedule.pause":   {syntax: "name", summary: "Stops a schedule's fires until it is resumed.", write: true},
		"schedule.trigger": {syntax: "name", summary: "Fires a schedule now, without changing its next fire.", write: true},
		"schedule.resume":  {syntax: "name [CATCHUP]", summary: "Resumes a paused schedule, with its missed fires if CATCHUP.", write: true},
		"schedule.delete":  {syntax: "name", summary: "Deletes a schedule; the jobs it submitted stay.", write: true},
	},
	groupPubSub: {
		"subscribe":    {syntax: "channel [channel …]", summary: "Listens for messages on channels: job.<id>.status, queue.<name>.events."},
		"psubscribe":   {syntax: "pattern [pattern …]", summary: "Listens for messages on the channels matching glob patterns."},
		"unsubscribe":  {syntax: "[channel …]", summary: "Stops listening on channels (all when none is named)."},
		"punsubscribe": {syntax: "[pattern …]", summary: "Stops listening on patterns (all when none is named)."},
		"publish":      {syntax: "channel message", summary: "Publishes a log line of a job the worker holds, on job.<id>.logs.", write: true},
	},
	groupWorkers: {
		"worker.register":   {syntax: "json", summary: "Registers a worker with its capabilities, or takes its record over.", write: true},
		"worker.heartbeat":  {syntax: "worker_id [stats_json]", summary: "Records that the worker is alive and extends the leases of its jobs.", write: true},
		"worker.list":       {syntax: "[ACTIVE|DRAINING|DEAD|UNREGISTERED]", summary: "The worker ids, optionally of one state."},
		"worker.get":        {syntax: "worker_id", summary: "The worker as JSON: state, capabilities, heartbeat, stats, jobs."},
		"worker.drain":      {syntax: "worker_id", summary: "The worker gets no new jobs; its running ones finish.", write: true},
		"worker.unregister": {syntax: "worker_id", summary: "Ends a worker's registration; jobs it holds go back to their queues.", write: true},
	},
})

// docFor is c's doc with its parsed arguments; every registered command
// has one (buildTable checks).
func docFor(name string) (commandDoc, []docArg, error) {
	d, ok := commandDocs[name]
	if !ok && slices.Contains(refusedWrites, name) {
		d, ok = refusedDoc, true
	}
	if !ok {
		return d, nil, fmt.Errorf("command %s has no docs", name)
	}
	args, err := parseSyntax(d.syntax)
	if err != nil {
		return d, nil, fmt.Errorf("command %s: %w", name, err)
	}
	return d, args, nil
}

// docsReply is c's COMMAND DOCS entry.
func docsReply(c *Command) resp.Reply {
	args := resp.ArrayOf(c.args, docArg.reply)
	return resp.Map{
		{Key: "summary", Value: resp.BulkString(c.doc.summary)},
		{Key: "since", Value: resp.BulkString("0.1.0")},
		{Key: "group", Value: resp.BulkString(c.doc.group)},
		{Key: "arguments", Value: args},
	}
}

// Syntax is the command's usage line: its name in capitals and its syntax.
func (c *Command) Syntax() string {
	return strings.TrimSpace(strings.ToUpper(c.Name) + " " + c.doc.syntax)
}
