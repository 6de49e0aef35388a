"""The worker: registration, heartbeats, pops for the free slots, handlers
in threads, pipelined reports, and the drain."""
from __future__ import annotations

import heapq
import itertools
import json
import logging
import platform
import queue as queue_mod
import signal
import socket
import threading
import time
import traceback
from typing import Any, Callable, Dict, Generic, List, Optional, Sequence, Tuple, TypeVar

import redis

from ._conn import DEFAULT_ADDR, Backoff, call, connect, wait
from .errors import (Cancelled, DeliveryLost, NoPermission, NotRegistered, Permanent, ReplyError,
                     ShuttingDown, Snooze, Stopped, TimedOut, TryAgain, WrongStatus, describe, is_permanent,
                     reply_error, translate)
from .job import Job, _current, utcnow

Handler = Callable[[Job], Any]

# As many reports as agq puts in one group commit: one pipeline, one commit.
_MAX_REPORT_BATCH = 500

# What a _Batches holds.
B = TypeVar("B")

# How long a pop waits, after a slot freed, for more to free: a burst of
# short jobs ends within it, and one pop then serves all their slots.
_POP_SETTLE = 0.002
_CONNECTION_TROUBLE = (redis.ConnectionError, redis.TimeoutError, OSError)


class Worker:
    """Runs jobs from agq.

        worker = agq.Worker("worker-1", key, queues=["emails"], concurrency=4)

        @worker.handler("send-email")
        def send(job):
            ...
            return {"sent": True}   # the job's output

        worker.run()               # until SIGTERM or SIGINT, then drains

    A handler gets the Job and returns its output (anything JSON encodes),
    which completes the job. An exception fails the attempt: agq retries it
    after its backoff while attempts remain, unless it is permanent
    (agq.Permanent, or an attribute non_retryable = True). agq.Snooze(s)
    puts the job back for s seconds without counting the attempt.

    Handlers run in threads, concurrency of them at once. A job cancelled
    while it runs, one past its timeout, and every job still running at
    the end of a drain's grace are told through job.stop_event
    (job.stopping, job.check(), job.wait()), and their steps and reports
    raise agq.Stopped subclasses: Python cannot stop a thread from outside,
    so a long handler looks now and then.
    """

    def __init__(self, worker_id: str, key: str, *, addr: str = DEFAULT_ADDR,
                 queues: Sequence[str] = ("ready",), concurrency: int = 1,
                 tools: Sequence[str] = (), agentic_units: Sequence[str] = (), types: Sequence[str] = (),
                 hostname: Optional[str] = None, version: str = "agq-python",
                 tags: Optional[Dict[str, str]] = None, heartbeat_interval: Optional[float] = None,
                 shutdown_grace: float = 30.0, report_grace: float = 15.0, ack_after: float = 10.0,
                 pop_timeout: float = 5.0, backoff_min: float = 1.0, backoff_max: float = 60.0,
                 listen_for_cancel: bool = True, logger: Optional[logging.Logger] = None,
                 redis_options: Optional[Dict[str, Any]] = None) -> None:
        """worker_id: 1-64 of A-Za-z0-9_-; key: the worker's key (KEY.CREATE
        worker <id>); queues in priority order, without "queue:".
        heartbeat_interval replaces the one agq names at registration.
        shutdown_grace: how long running jobs may go on once the worker
        stops before they are told to stop; report_grace: how long their
        reports may take after that. ack_after: how long a job runs before
        its delivery is acknowledged on its own. listen_for_cancel: also
        hear cancellations on job.cancel, sooner than the next heartbeat.
        redis_options: more redis.Redis arguments (ssl=True, ...)."""
        if not worker_id or not key:
            raise ValueError("a worker needs an id and a key")
        if not 1 <= concurrency <= 1000:
            raise ValueError("concurrency must be 1 to 1000")
        self.worker_id = worker_id
        self.addr = addr
        self.queues = list(queues) or ["ready"]
        self.concurrency = concurrency
        self.tools, self.agentic_units, self.types = list(tools), list(agentic_units), list(types)
        self.hostname = hostname or socket.gethostname() or "unknown"
        self.version = version
        self.tags = dict(tags or {})
        self.shutdown_grace, self.report_grace, self.ack_after = shutdown_grace, report_grace, ack_after
        self.pop_timeout = pop_timeout
        self.backoff_min, self.backoff_max = backoff_min, backoff_max
        self.listen_for_cancel = listen_for_cancel
        self._key = key
        self._redis_options = redis_options
        self._fixed_interval = heartbeat_interval
        self._interval = heartbeat_interval or 30.0
        self._log = logger or logging.getLogger("agq.worker")
        self._handlers: Dict[str, Handler] = {}

        self._rdb: redis.Redis = None  # type: ignore[assignment]  # made by run()
        self._pop: Optional[redis.Redis] = None

        # Registration: the worker is registered while _reg_current equals
        # _reg_stale, which each loss (a dropped connection, "Worker not
        # registered") moves on.
        self._reg_lock = threading.Lock()
        self._reg_stale = 1
        self._reg_current = 0

        self._jobs_lock = threading.Lock()
        self._changed = threading.Condition(self._jobs_lock)  # a slot freed, a job reported
        self._running: Dict[str, Job] = {}  # until agq has the final report
        self._free = concurrency
        self._unreported = 0
        self._completed = 0
        self._failed = 0

        self._reports: _Batches[_Report] = _Batches(open=True)
        # The slots' STEP.* calls waiting for their pipeline (_step_caller),
        # taken while run() works.
        self._step_calls: _Batches[_StepCall] = _Batches(open=False)

        self._slots: "queue_mod.SimpleQueue[Optional[Tuple[str, str]]]" = queue_mod.SimpleQueue()
        self._slot_threads = 0
        self._idle_slots = 0

        self._clock = _Clock()
        self._stop_requested = threading.Event()  # stop() or a signal
        self._pop_stop = threading.Event()  # no more pops: stopping, or agq asked to drain
        self._now = threading.Event()  # stop_now(): no grace
        self._abandon = threading.Event()  # the last reports are given up
        self._bg_stop = threading.Event()  # heartbeats and the cancel listener end
        self._fatal: Optional[BaseException] = None
        self._started = time.monotonic()
        self._ran = False

    # -- configuration ------------------------------------------------------

    def handler(self, job_type: str) -> Callable[[Handler], Handler]:
        """A decorator: the function runs the jobs of job_type."""

        def register(fn: Handler) -> Handler:
            self.handle(job_type, fn)
            return fn

        return register

    def handle(self, job_type: str, fn: Handler) -> None:
        """fn runs the jobs of job_type (which the worker then offers)."""
        self._handlers[job_type] = fn

    # -- running ------------------------------------------------------------

    def run(self, install_signal_handlers: bool = True) -> None:
        """Works until stop() (or, with install_signal_handlers, in the main
        thread, SIGTERM or SIGINT; a second one is stop_now()), then drains:
        it pops nothing more, lets the running jobs finish within
        shutdown_grace, tells the rest to stop and reports them, and
        unregisters. It raises when agq refuses the worker (a wrong key, an
        id of another key). A Worker runs once."""
        if self._ran:
            raise RuntimeError("a Worker runs once")
        self._ran = True
        restore = self._install_signals() if install_signal_handlers else {}
        self._rdb = connect(self.addr, self.worker_id, self._key, socket_timeout=30,
                            options=self._redis_options)
        # The pop's own connection: closing it cuts a blocked pop off, and
        # agq neither hands nor loses a job to a client that leaves.
        self._pop = connect(self.addr, self.worker_id, self._key, socket_timeout=self.pop_timeout + 30,
                            single=True, options=self._redis_options)
        threads: List[threading.Thread] = []
        try:
            self._log.info("worker %s starting: %s, queues %s, concurrency %d", self.worker_id, self.addr,
                           ",".join(self.queues), self.concurrency)
            try:
                with self._reg_lock:
                    self._register(self._stop_requested)
            except _GaveUp:
                return  # stopped before agq could be reached
            self._clock.start()
            background = [self._heartbeat_loop] + ([self._cancel_listener] if self.listen_for_cancel else [])
            threads = [_start(fn) for fn in background]
            reporter = _start(self._reporter)
            self._step_calls.open()
            step_caller = _start(self._step_caller)
            popper = _start(self._pop_loop)
            while not self._stop_requested.wait(0.5):
                if self._fatal is not None:
                    break
            if self._fatal is not None:
                self._log.error("agq refused this worker; stopping: %s", self._fatal)
            self._end_popping()
            popper.join()
            self._drain(now=self._fatal is not None)
            self._step_calls.close()
            step_caller.join()
            self._bg_stop.set()
            for t in threads:
                t.join()
            self._reports.close()
            reporter.join()
            if self._fatal is None:
                self._unregister()
            self._log.info("worker %s stopped: %d completed, %d failed", self.worker_id, self._completed,
                           self._failed)
        finally:
            self._stop_requested.set()
            self._bg_stop.set()
            self._clock.stop()
            for _ in range(self._slot_threads):
                self._slots.put(None)
            self._rdb.close()
            self._pop.close()
            for sig, handler in restore.items():
                signal.signal(sig, handler)
        if self._fatal is not None:
            raise self._fatal

    def stop(self) -> None:
        """Begins the drain (thread-safe; a signal handler may call it)."""
        self._stop_requested.set()

    def stop_now(self) -> None:
        """Ends a drain's wait for the running jobs: they are told to stop
        and reported at once (an operator's second interrupt)."""
        self._now.set()
        self._stop_requested.set()

    @property
    def draining(self) -> bool:
        """Whether the worker takes no more jobs."""
        return self._pop_stop.is_set()

    def stats(self) -> Dict[str, int]:
        """The counts each heartbeat sends."""
        with self._jobs_lock:
            return {"active_jobs": len(self._running), "completed_jobs_total": self._completed,
                    "failed_jobs_total": self._failed,
                    "uptime_seconds": int(time.monotonic() - self._started)}

    def _install_signals(self) -> Dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: Any) -> None:
            if self._stop_requested.is_set():
                self._log.warning("second interrupt: stopping the running jobs now")
                self.stop_now()
            else:
                self._log.info("%s: draining", signal.Signals(signum).name)
                self.stop()

        return {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

    def _fail(self, error: BaseException) -> None:
        if self._fatal is None:
            self._fatal = error
        self._stop_requested.set()

    def _backoff(self) -> Backoff:
        return Backoff(self.backoff_min, self.backoff_max, lambda: self._interval)

    # -- registration and heartbeats -----------------------------------------

    def _registration_lost(self) -> None:
        self._reg_stale += 1

    def _ensure_registered(self) -> bool:
        """Registers again after the registration was lost; False when agq
        refused it or the worker gave up."""
        if self._reg_current == self._reg_stale:
            return True
        with self._reg_lock:
            if self._reg_current == self._reg_stale:
                return True
            try:
                self._register(self._abandon)
                return True
            except ReplyError as e:
                self._fail(e)
                return False
            except _GaveUp:
                return False

    def _register(self, give_up: threading.Event) -> None:
        """WORKER.REGISTER until agq answers; a refusal raises. Called with
        _reg_lock held."""
        backoff = self._backoff()
        while True:
            seen = self._reg_stale
            try:
                reply = call(self._rdb, "WORKER.REGISTER", json.dumps(self._registration()))
            except TryAgain as e:
                err: Exception = e
            except _CONNECTION_TROUBLE as e:
                err = e
            else:
                self._reg_current = seen
                self._registered(reply)
                return
            pause = backoff.next()
            self._log.warning("registration failed: %s; again in %.1fs", err, pause)
            if not wait(give_up, pause):
                raise _GaveUp()

    def _registered(self, reply: str) -> None:
        if self._fixed_interval is None:
            for token in str(reply).split():
                if token.startswith("heartbeat_interval="):
                    try:
                        self._interval = max(float(token.partition("=")[2]), 0.05)
                    except ValueError:
                        pass
        self._log.info("registered as %s; heartbeat every %gs", self.worker_id, self._interval)

    def _registration(self) -> Dict[str, Any]:
        """WORKER.REGISTER's document, with the jobs this process runs: agq
        gives back at once those an earlier process of this id lost."""
        with self._jobs_lock:
            running = sorted(self._running)
        return {
            "worker_id": self.worker_id,
            "hostname": self.hostname,
            "platform": f"{platform.system().lower()}-{platform.machine()}",
            "agw_version": self.version,
            "capabilities": {"tools": self.tools, "agentic_units": self.agentic_units,
                             "types": sorted(set(self.types) | set(self._handlers))},
            "max_concurrent_jobs": self.concurrency,
            "tags": self.tags,
            "running_jobs": running,
        }

    def _heartbeat_loop(self) -> None:
        """WORKER.HEARTBEAT every interval; a failed one is retried sooner:
        three missed intervals and agq declares the worker dead."""
        backoff = self._backoff()
        pause = self._interval
        while wait(self._bg_stop, pause):
            pause = self._interval
            if not self._ensure_registered():
                return
            try:
                reply = call(self._rdb, "WORKER.HEARTBEAT", self.worker_id, json.dumps(self.stats()))
            except NoPermission as e:
                self._fail(e)
                return
            except NotRegistered as e:
                self._log.warning("agq does not know this worker; registering again")
                self._registration_lost()
                err: Exception = e
            except TryAgain as e:
                err = e
            except _CONNECTION_TROUBLE as e:
                self._registration_lost()
                err = e
            else:
                backoff.reset()
                self._on_heartbeat(str(reply))
                continue
            pause = min(backoff.next(), self._interval)
            self._log.warning("heartbeat failed: %s; again in %.1fs", err, pause)

    def _on_heartbeat(self, reply: str) -> None:
        """Reads "OK [drain=true] [cancel=<id>,<id>]"."""
        for token in reply.split()[1:]:
            name, _, value = token.partition("=")
            if name == "drain" and value == "true" and not self._pop_stop.is_set():
                self._log.info("agq asked this worker to drain: finishing the running jobs, taking no new ones")
                self._end_popping()
            elif name == "cancel":
                for job_id in filter(None, value.split(",")):
                    self._cancel_job(job_id)

    def _cancel_listener(self) -> None:
        """Hears job.cancel, which names a job as soon as its cancellation
        is asked, sooner than the next heartbeat."""
        backoff = self._backoff()
        while not self._bg_stop.is_set():
            pubsub = self._rdb.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe("job.cancel")
                backoff.reset()
                while not self._bg_stop.is_set():
                    message = pubsub.get_message(timeout=0.5)
                    if message and message.get("type") == "message":
                        self._cancel_job(str(message["data"]))
            except redis.ResponseError as e:
                self._log.warning("not listening on job.cancel: %s", reply_error(e))
                return
            except _CONNECTION_TROUBLE as e:
                pause = backoff.next()
                if not self._bg_stop.is_set():
                    self._log.warning("job.cancel: %s; again in %.1fs", e, pause)
                wait(self._bg_stop, pause)
            finally:
                try:
                    pubsub.close()
                except Exception:
                    pass

    def _cancel_job(self, job_id: str) -> None:
        with self._jobs_lock:
            job = self._running.get(job_id)
        if job is not None and not job._final:
            self._log.info("agq cancelled job %s; stopping it", job_id)
            job._interrupt(Cancelled("CANCELLED", f"job {job_id} was cancelled"))

    def _unregister(self) -> None:
        backoff = self._backoff()
        deadline = time.monotonic() + 10
        while True:
            try:
                call(self._rdb, "WORKER.UNREGISTER", self.worker_id)
                self._log.info("unregistered")
                return
            except (TryAgain, *_CONNECTION_TROUBLE) as e:  # type: ignore[misc]
                if time.monotonic() < deadline:
                    time.sleep(backoff.next())
                    continue
                err: Exception = e
            except ReplyError as e:
                err = e
            self._log.warning("could not unregister (agq declares the worker dead after missed heartbeats): %s",
                              err)
            return

    # -- popping --------------------------------------------------------------

    def _pop_loop(self) -> None:
        """Keeps the slots full: whenever some are free it takes up to that
        many jobs with one BLMPOP, from the first of the queues that has any."""
        assert self._pop is not None
        keys = ["queue:" + q for q in self.queues]
        backoff = self._backoff()
        while True:
            n = self._reserve()
            if n == 0:
                return
            if not self._ensure_registered():
                self._release(n)
                return
            try:
                reply = call(self._pop, "BLMPOP", repr(float(self.pop_timeout)), len(keys), *keys,
                             "RIGHT", "COUNT", n)
            except NoPermission as e:
                self._release(n)
                self._fail(e)
                return
            except NotRegistered as e:
                self._release(n)
                self._registration_lost()
                err: Exception = e
            except (ReplyError, *_CONNECTION_TROUBLE) as e:  # type: ignore[misc]
                self._release(n)
                if self._pop_stop.is_set():
                    return
                if not isinstance(e, ReplyError):
                    self._registration_lost()
                err = e
            else:
                backoff.reset()
                if not reply:
                    self._release(n)
                    continue
                key, raws = reply[0], reply[1]
                self._release(n - len(raws))
                for raw in raws:
                    self._start(key[len("queue:"):], raw)
                continue
            pause = backoff.next()
            self._log.warning("pop failed: %s; again in %.1fs", err, pause)
            if not wait(self._pop_stop, pause):
                return

    def _reserve(self) -> int:
        """Waits until a slot is free and takes all that are: at once when
        all are, else _POP_SETTLE after it first saw one free. 0 when
        popping stopped. Popping pauses while many final reports wait for
        agq: a worker that cannot report takes no more jobs."""
        settle: Optional[float] = None
        backlog = max(2 * self.concurrency, _MAX_REPORT_BATCH)
        with self._changed:
            while not self._pop_stop.is_set():
                if self._free > 0 and self._unreported < backlog:
                    now = time.monotonic()
                    if self._free == self.concurrency or settle is not None and now >= settle:
                        n, self._free = self._free, 0
                        return n
                    if settle is None:
                        settle = now + _POP_SETTLE
                    self._changed.wait(settle - now)
                else:
                    self._changed.wait(0.5)
        return 0

    def _release(self, n: int) -> None:
        if n:
            with self._changed:
                self._free += n
                self._changed.notify_all()

    def _end_popping(self) -> None:
        """Stops popping; shutting the pop's socket down cuts a blocked
        BLMPOP off at once."""
        self._pop_stop.set()
        with self._changed:
            self._changed.notify_all()
        conn = getattr(self._pop, "connection", None)
        sock = getattr(conn, "_sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- slots ----------------------------------------------------------------

    def _start(self, queue: str, raw: str) -> None:
        """Hands a delivered job to an idle slot thread, or starts one. Slot
        threads outlive their jobs and are daemons: a handler that never
        returns does not keep the process alive after run()."""
        with self._jobs_lock:
            spawn = self._idle_slots == 0 and self._slot_threads < self.concurrency
            if spawn:
                self._slot_threads += 1
            else:
                self._idle_slots -= 1
        self._slots.put((queue, raw))
        if spawn:
            threading.Thread(target=self._slot, name=f"agq-slot-{self._slot_threads}", daemon=True).start()

    def _slot(self) -> None:
        while True:
            item = self._slots.get()
            if item is None:
                return
            try:
                self._run_job(*item)
            except Exception:  # a bug of this package must not lose the slot
                self._log.exception("running a job failed")
            with self._jobs_lock:
                self._idle_slots += 1

    def _run_job(self, queue: str, raw: str) -> None:
        """Runs a delivered job's handler and hands its final report to the
        reporter. The slot frees when the handler returns; the job stays
        this worker's (named at registration, waited for by a drain) until
        agq has the report."""
        try:
            msg = json.loads(raw)
            if not isinstance(msg, dict) or not isinstance(msg.get("job_id"), str):
                raise ValueError("no job_id")
        except ValueError as e:
            self._log.error("received a job without a readable job_id (agq delivers it again after its "
                            "acknowledgement timeout): %s", e)
            self._handler_returned(False)
            return
        job = Job(msg, queue, self)
        with self._jobs_lock:
            self._running[job.id] = job
        ack = self._clock.after(self.ack_after, lambda: _start(job._acknowledge))
        timeout = None
        if job.timeout:
            timeout = self._clock.after(job.timeout, lambda: job._interrupt(
                TimedOut(f"job {job.id} ran past its timeout of {job.timeout:g}s")))
        result: Any = None
        error: Optional[Exception] = None
        handler = self._handlers.get(job.type)
        _current.job = job
        try:
            if handler is None:
                raise Permanent(f"no handler for jobs of type {job.type!r}")
            result = handler(job)
        except Exception as e:
            error = e
        finally:
            _current.job = None
            ack.cancel()
            if timeout is not None:
                timeout.cancel()
        self._finish(job, result, error)

    def _finish(self, job: Job, result: Any, error: Optional[Exception]) -> None:
        held = job._take_final_held()
        with job._lock:
            with self._jobs_lock:
                job._final = True
                cause, ended = job._cause, job._ended
            if ended:
                self._handler_returned(False)
                self._untrack(job, reported=False)
                return
            doc, failed = _final_doc(result, error, cause)
            try:
                body = json.dumps(job._report_doc(doc))
            except (TypeError, ValueError) as e:
                doc, failed = {"status": "failed", "error": f"its result is not JSON: {e}", "retryable": False}, True
                body = json.dumps(job._report_doc(doc))
            with self._jobs_lock:
                if failed:
                    self._failed += 1
                elif doc["status"] == "completed":
                    self._completed += 1
            if failed:
                detail = "" if isinstance(error, Stopped) or error is None else "\n" + "".join(
                    traceback.format_exception(type(error), error, error.__traceback__))
                self._log.warning("job %s failed (%s): %s%s", job.id,
                                  "retryable" if doc["retryable"] else "not retryable", doc["error"], detail)
            self._handler_returned(True)
            self._reports.put(_Report(job, body, held), even_closed=True)

    def _handler_returned(self, reporting: bool) -> None:
        with self._changed:
            self._free += 1
            if reporting:
                self._unreported += 1
            self._changed.notify_all()

    def _untrack(self, job: Job, reported: bool) -> None:
        """Forgets job once agq has its final report (or it needs none)."""
        with self._changed:
            if reported:
                self._unreported -= 1
            if self._running.get(job.id) is job:
                del self._running[job.id]
            self._changed.notify_all()

    def _running_doc(self) -> Dict[str, Any]:
        return {"status": "running", "worker_id": self.worker_id, "started_at": utcnow()}

    # -- reports ----------------------------------------------------------------

    def _reporter(self) -> None:
        """Sends the waiting final reports in pipelines: reports about
        different jobs in one pipeline share a commit on agq, and each still
        gets its own reply. While one pipeline is out the next gathers."""
        while True:
            batch = self._reports.take()
            if not batch:
                return
            self._send_reports(batch)

    def _send_reports(self, batch: List["_Report"]) -> None:
        """Sends batch until each report has its answer; a report that met
        connection trouble, or a server that no longer knows this worker,
        is sent again after a backoff (agq applies a repeated report once).
        The completions of the jobs' last steps go first, all of them, then
        the reports: agq applies each before its job's report, and the
        completions share one commit and the reports another."""
        backoff = self._backoff()
        while batch:
            pipe = self._rdb.pipeline(transaction=False)
            completing = [r for r in batch if r.held is not None]
            for r in completing:
                assert r.held is not None
                pipe.execute_command("STEP.COMPLETE", r.job.id, r.held[0], r.held[1], "DELIVERY", r.job.delivery)
            for r in batch:
                pipe.execute_command("JOB.UPDATE", r.job.id, r.body)
            try:
                replies: List[Any] = pipe.execute(raise_on_error=False)
            except _CONNECTION_TROUBLE as e:
                replies = [e] * (len(completing) + len(batch))
            for r, reply in zip(completing, replies):
                if isinstance(reply, redis.ResponseError):
                    reply = reply_error(reply)
                if isinstance(reply, (TryAgain, NotRegistered, *_CONNECTION_TROUBLE)):
                    continue  # sent again with the report (a completion sent again answers OK)
                if isinstance(reply, Exception) and not isinstance(reply, (Cancelled, DeliveryLost, WrongStatus)):
                    self._log.warning("could not complete the last step of job %s: %s", r.job.id, reply)
                r.held = None
            retry: List[_Report] = []
            unknown = False
            err: Any = None
            for r, reply in zip(batch, replies[len(completing):]):
                if isinstance(reply, redis.ResponseError):
                    reply = reply_error(reply)
                if isinstance(reply, (TryAgain, NotRegistered, *_CONNECTION_TROUBLE)):
                    retry.append(r)
                    unknown = unknown or isinstance(reply, NotRegistered)
                    err = reply
                    continue
                if isinstance(reply, Exception) and not isinstance(reply, (Cancelled, DeliveryLost, WrongStatus)):
                    self._log.error("could not report the end of job %s: %s", r.job.id, reply)
                self._untrack(r.job, reported=True)
            batch = retry
            if not batch:
                return
            if not isinstance(err, TryAgain):
                self._registration_lost()
            pause = backoff.next()
            self._log.warning("JOB.UPDATE of %d jobs failed: %s; again in %.1fs", len(batch), err, pause)
            if wait(self._abandon, pause) and (not unknown or self._ensure_registered()):
                continue
            for r in batch:
                self._log.error("gave up reporting job %s; agq re-queues it when the worker unregisters", r.job.id)
                self._untrack(r.job, reported=True)
            return

    # -- step calls -------------------------------------------------------------

    def _step_call(self, *args: Any) -> Any:
        """Sends a STEP.* call with the other slots' step calls, in one
        pipeline, and returns its reply (an error reply raises its
        ReplyError subclass). Outside run(), it goes alone."""
        c = _StepCall(args)
        if not self._step_calls.put(c):
            return call(self._rdb, *args)
        c.done.wait()
        if c.error is not None:
            raise c.error
        return c.reply

    def _step_caller(self) -> None:
        """Sends the waiting step calls in pipelines, one at a time: agq
        serves the begins and completions of one pipeline, about different
        jobs, as one run sharing their commits, and writes their replies
        together. While one pipeline is out the next gathers."""
        while True:
            batch = self._step_calls.take()
            if not batch:
                return
            pipe = self._rdb.pipeline(transaction=False)
            for c in batch:
                pipe.execute_command(*c.args)
            try:
                replies: List[Any] = pipe.execute(raise_on_error=False)
            except Exception as e:  # connection trouble: each caller decides what it means
                replies = [e] * len(batch)
            for c, reply in zip(batch, replies):
                if isinstance(reply, (redis.ResponseError, redis.AuthenticationError)):
                    c.error = translate(reply)
                elif isinstance(reply, Exception):
                    c.error = reply
                else:
                    c.reply = reply
                c.done.set()

    # -- draining ---------------------------------------------------------------

    def _drain(self, now: bool) -> None:
        """Waits for the running jobs up to shutdown_grace, then tells them
        to stop and waits report_grace for their reports."""
        if not now:
            with self._changed:
                n = len(self._running)
            if n:
                self._log.info("draining: no new jobs; waiting up to %gs for the %d running", self.shutdown_grace, n)
            if self._wait_idle(self.shutdown_grace, self._now):
                return
        with self._jobs_lock:
            jobs = list(self._running.values())
        self._log.warning("telling the jobs still running to stop: %s", ", ".join(j.id for j in jobs))
        for job in jobs:
            job._interrupt(ShuttingDown("worker shutting down"))
        if not self._wait_idle(self.report_grace, None):
            self._abandon.set()
            self._wait_idle(2.0, None)

    def _wait_idle(self, seconds: float, cut: Optional[threading.Event]) -> bool:
        """Waits until no job is held, up to seconds or until cut is set."""
        end = time.monotonic() + seconds
        with self._changed:
            while self._running:
                left = end - time.monotonic()
                if left <= 0 or cut is not None and cut.is_set():
                    return False
                self._changed.wait(min(left, 0.2))
        return True


def _final_doc(result: Any, error: Optional[Exception], cause: Optional[Stopped]) -> Tuple[Dict[str, Any], bool]:
    """The final JOB.UPDATE document of how the handler ended, and whether
    it is a failed attempt."""
    if isinstance(cause, Cancelled):
        return {"status": "cancelled"}, False
    if error is None:
        return {"status": "completed", "output": result}, False
    if isinstance(error, Snooze):
        return {"status": "snoozed", "seconds": max(float(error.seconds), 0.001)}, False
    message = describe(error)
    if isinstance(cause, ShuttingDown):
        if not isinstance(error, ShuttingDown):
            message = "worker shutting down: " + message
        return {"status": "failed", "error": message, "retryable": True}, True
    if isinstance(cause, TimedOut):
        return {"status": "failed", "error": "timed out: " + message, "retryable": True}, True
    return {"status": "failed", "error": message, "retryable": not is_permanent(error)}, True


class _GaveUp(Exception):
    pass


class _Batches(Generic[B]):
    """What waits for its pipeline (final reports, step calls), taken in
    batches by the one thread that sends them."""

    def __init__(self, open: bool) -> None:
        self._items: List[B] = []
        self._cv = threading.Condition()
        self._closed = not open

    def put(self, item: B, even_closed: bool = False) -> bool:
        """Queues item, unless the queue is closed (even_closed: then it
        goes only if the sender has not taken its last batch yet)."""
        with self._cv:
            if self._closed and not even_closed:
                return False
            self._items.append(item)
            self._cv.notify()
            return True

    def take(self) -> List[B]:
        """Waits for items and returns up to _MAX_REPORT_BATCH of them;
        none once the queue is closed and empty."""
        with self._cv:
            while not self._items and not self._closed:
                self._cv.wait()
            batch = self._items[:_MAX_REPORT_BATCH]
            del self._items[:_MAX_REPORT_BATCH]
            return batch

    def open(self) -> None:
        with self._cv:
            self._closed = False

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()


class _StepCall:
    """A step call waiting for its pipeline, then its reply or error."""
    __slots__ = ("args", "reply", "error", "done")

    def __init__(self, args: Tuple[Any, ...]) -> None:
        self.args = args
        self.reply: Any = None
        self.error: Optional[Exception] = None
        self.done = threading.Event()


class _Report:
    """A final report waiting for its pipeline, with the completion of the
    job's last step held for it (step_id, output JSON), if any."""
    __slots__ = ("job", "body", "held")

    def __init__(self, job: Job, body: str, held: Optional[Tuple[str, str]]) -> None:
        self.job = job
        self.body = body
        self.held = held


def _start(fn: Callable[[], Any]) -> threading.Thread:
    t = threading.Thread(target=fn, name="agq-" + getattr(fn, "__name__", "thread").strip("_"), daemon=True)
    t.start()
    return t


class _Timer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Clock:
    """One thread for every job's acknowledgement and timeout, rather than
    a threading.Timer (a thread) each."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: List[Tuple[float, int, Callable[[], Any], _Timer]] = []
        self._seq = itertools.count()
        self._stopped = False
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._thread = _start(self._loop)

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify()

    def after(self, seconds: float, fn: Callable[[], Any]) -> _Timer:
        timer = _Timer()
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._seq), fn, timer))
            if self._heap[0][3] is timer:
                self._cv.notify()
        return timer

    def _loop(self) -> None:
        while True:
            with self._cv:
                while True:
                    if self._stopped:
                        return
                    while self._heap and self._heap[0][3].cancelled:
                        heapq.heappop(self._heap)
                    if self._heap and self._heap[0][0] <= time.monotonic():
                        _, _, fn, timer = heapq.heappop(self._heap)
                        break
                    self._cv.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
            if not timer.cancelled:
                try:
                    fn()
                except Exception:
                    logging.getLogger("agq.worker").exception("a timer failed")
