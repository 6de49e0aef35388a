"""A job as a handler sees it: its fields, its durable steps and sleeps,
and the signs that it must stop."""
from __future__ import annotations

import functools
import json
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, TypeVar, overload

import redis

from ._conn import call
from .errors import (Awaiting, Cancelled, DeliveryLost, NotRegistered, Permanent, ReplyError, Sleeping, StaleDelivery,
                     StepAttemptsUsed, StepFailed, WaitTimedOut, Stopped, TryAgain, WrongStatus, OwnedByAnotherWorker, describe, is_permanent)

if TYPE_CHECKING:
    from .worker import Worker

T = TypeVar("T")

_current = threading.local()

# How long the commands that keep work already done (a step's output, its
# failure) go on trying after the job was told to stop.
_DETACHED_SECONDS = 10.0

# A step's completion is held briefly for the job's next call to agq, so
# that it shares that call's round trip and commit: the next step's begin
# carries it (STEP.COMPLETE ... NEXT), and the final report's pipeline
# sends it first; any other step call sends it first. A job of n steps then
# costs n+1 round trips instead of 2n+1. A handler that goes on for longer
# than this before its next call has the completion sent alone then, so
# that a finished step's output is kept soon whatever the handler does.
_HELD_STEP_SECONDS = 0.05


def current_job() -> "Job":
    """The job the calling thread's handler runs; RuntimeError outside one."""
    job = getattr(_current, "job", None)
    if job is None:
        raise RuntimeError("no agq job runs in this thread")
    return job


class Job:
    """One delivery of a job to a handler.

    The job's fields as agq delivered them: id, type, queue, attempt
    (numbering its deliveries from 1), max_attempts, priority, payload,
    plan, inputs and parents (decoded from JSON), timeout (seconds, or
    None), traceparent and tracestate, and raw, the whole delivered object.
    """

    def __init__(self, msg: Dict[str, Any], queue: str, worker: "Worker") -> None:
        self.raw: Dict[str, Any] = msg
        self.id: str = msg["job_id"]
        self.type: str = msg.get("type") or ""
        self.queue: str = msg.get("queue") or queue
        self.attempt: int = int(msg.get("attempt") or 0)
        self.max_attempts: int = int(msg.get("max_attempts") or 0)
        self.priority: int = int(msg.get("priority") or 0)
        self.payload: Any = msg.get("payload")
        self.plan: Any = msg.get("plan")
        self.inputs: Any = msg.get("inputs")
        self.parents: Optional[Dict[str, Any]] = msg.get("parents")
        secs = msg.get("timeout_seconds")
        self.timeout: Optional[float] = float(secs) if secs else None
        self.traceparent: str = msg.get("traceparent") or ""
        self.tracestate: str = msg.get("tracestate") or ""
        self.delivery: str = msg.get("delivery") or ""

        self._worker = worker
        self._lock = threading.Lock()  # keeps one job's reports in order
        self._stop = threading.Event()
        self._cause: Optional[Stopped] = None
        self._acked = False
        self._final = False
        # agq ended this delivery (a step failed, a sleep, a cancellation or
        # loss it confirmed): nothing more is reported.
        self._ended = False
        # The last step's completion not sent yet: (step_id, output JSON).
        # _held_lock is held while it is sent, so that the job's step calls
        # reach agq in the order the handler made them.
        self._held: Optional[Tuple[str, str]] = None
        self._held_lock = threading.Lock()
        self._held_timer: Any = None

    # -- stopping ---------------------------------------------------------

    @property
    def stop_event(self) -> threading.Event:
        """Set when the handler should stop: the job was cancelled, timed
        out, or the worker shuts down."""
        return self._stop

    @property
    def stopping(self) -> bool:
        """Whether the handler should stop."""
        return self._stop.is_set()

    @property
    def stop_reason(self) -> Optional[Stopped]:
        """Why the handler should stop (Cancelled, TimedOut, ShuttingDown,
        DeliveryLost), or None."""
        return self._cause

    def check(self) -> None:
        """Raises the reason the handler should stop, if there is one. Call
        it between pieces of work: Python cannot stop a thread from outside."""
        cause = self._cause
        if cause is not None:
            raise cause

    def wait(self, seconds: float) -> bool:
        """Sleeps up to seconds; True, at once, when the handler should stop."""
        return self._stop.wait(seconds)

    def _interrupt(self, cause: Stopped, ended: bool = False) -> None:
        with self._worker._jobs_lock:
            if self._cause is None:
                self._cause = cause
            if ended:
                self._ended = True
        self._stop.set()

    def _end(self) -> None:
        with self._worker._jobs_lock:
            self._ended = True

    # -- steps --------------------------------------------------------------

    def step(self, step_id: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Any:
        """Runs fn(*args, **kwargs) as the job's durable step step_id.

        When the step completed in an earlier delivery with the same
        arguments, fn does not run: its kept output is returned, decoded
        from JSON. Otherwise fn runs and its result, which must encode as
        JSON, is kept and returned as JSON gives it back (a tuple comes
        back a list), so that both ways return the same. The step's input,
        which agq compares, is the list of the arguments, with the keyword
        arguments as a last object when there are any.

        When fn raises, agq records the step's failure and ends this
        delivery: StepFailed is raised (fn's exception as its cause) and
        the handler lets it propagate. agq retries the job from this step
        at the step's backoff, or fails it when the exception is permanent
        (agq.Permanent, or an attribute non_retryable = True) or the step
        is out of attempts. An exception with a retry_after attribute
        (seconds) sets when it is retried.
        """
        step_input: List[Any] = list(args) + ([kwargs] if kwargs else [])
        try:
            begin = json.dumps({"input": step_input})
        except (TypeError, ValueError) as e:
            raise Permanent(f"step {step_id}: its arguments are not JSON: {e}") from e
        begun = json.loads(self._begin_step(step_id, begin))
        if not begun.get("execute"):
            self._worker._log.info("step %s of %s: done in an earlier delivery", step_id, self.id)
            return begun.get("output")
        try:
            out = fn(*args, **kwargs)
        except Exception as e:
            self._fail_step(step_id, e)
            raise AssertionError("unreachable")  # _fail_step raises
        try:
            output = json.dumps(out)
        except (TypeError, ValueError) as e:
            self._fail_step(step_id, Permanent(f"its output is not JSON: {e}"))
        # Kept with the job's next call to agq, or soon after (_HELD_STEP_SECONDS).
        self._hold(step_id, output)
        return json.loads(output)

    def _begin_step(self, step_id: str, begin: str) -> Any:
        """Begins step_id, completing the step held in the same call."""
        with self._held_lock:
            held = self._take_held()
            if held is None:
                return self._command("STEP.BEGIN", step_id, begin)
            try:
                return self._command("STEP.COMPLETE", held[0], held[1], "NEXT", step_id, begin)
            except (redis.ConnectionError, redis.TimeoutError, TryAgain, NotRegistered):
                # Told to stop while agq could not be reached: the finished
                # step is kept all the same (a completion sent again
                # answers OK).
                self._send_held(held)
                raise

    def _hold(self, step_id: str, output: str) -> None:
        """Holds step_id's completion until the job's next call, or
        _HELD_STEP_SECONDS."""
        with self._held_lock:
            self._send_held(self._take_held())  # two steps at once: the first goes now
            self._held = (step_id, output)
            self._held_timer = self._worker._clock.after(_HELD_STEP_SECONDS, self._flush_held_later)

    def _take_held(self) -> Optional[Tuple[str, str]]:
        """The completion held, if any, now held no more. With _held_lock."""
        held, self._held = self._held, None
        if self._held_timer is not None:
            self._held_timer.cancel()
            self._held_timer = None
        return held

    def _send_held(self, held: Optional[Tuple[str, str]]) -> None:
        if held is not None:
            self._command("STEP.COMPLETE", held[0], held[1], detached=True)

    def _flush_held(self) -> None:
        """Sends the completion held, if any, before another step call."""
        with self._held_lock:
            self._send_held(self._take_held())

    def _flush_held_later(self) -> None:
        """The clock's: sends the completion held, in a thread of its own."""
        def flush() -> None:
            try:
                self._flush_held()
            except Exception as e:  # the handler's next call meets the same trouble
                if not isinstance(e, Stopped):
                    self._worker._log.warning("could not complete a step of job %s: %s", self.id, e)

        threading.Thread(target=flush, name="agq-step-complete", daemon=True).start()

    def _take_final_held(self) -> Optional[Tuple[str, str]]:
        """The completion held once the handler returned, for the final
        report to carry."""
        with self._held_lock:
            return self._take_held()

    def _fail_step(self, step_id: str, error: Exception) -> None:
        doc: Dict[str, Any] = {"message": describe(error), "non_retryable": is_permanent(error)}
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            doc["retry_after_seconds"] = retry_after
        self._flush_held()
        reply = self._command("STEP.FAIL", step_id, json.dumps(doc), detached=True)
        self._end()
        try:
            retry = bool(json.loads(reply).get("retry"))
        except (ValueError, AttributeError):
            retry = False
        raise StepFailed(step_id, error, retry) from error

    def sleep(self, step_id: str, seconds: float) -> None:
        """A durable timer named step_id. The first call puts the job to
        sleep for seconds and raises Sleeping, which the handler lets
        propagate: agq delivers the job again at the wake time, when the
        same call returns at once (and the steps before it answer their
        kept outputs)."""
        self._flush_held()
        reply = self._command("STEP.SLEEP", step_id, _seconds(seconds))
        if isinstance(reply, str) and reply.startswith("SLEEPING "):
            self._end()
            raise Sleeping(step_id, reply[len("SLEEPING "):])

    def wait_signal(self, step_id: str, name: str, timeout: Optional[float] = None) -> Any:
        """Waits, durably, as step step_id, for the signal name sent to the
        job (Producer.signal, JOB.SIGNAL), up to timeout seconds (None: no
        deadline). A signal already sent is returned at once (its payload,
        decoded). Otherwise the job goes to wait and Awaiting is raised,
        which the handler lets propagate: agq delivers the job again when
        the signal comes, and the same call returns its payload; after the
        deadline it raises WaitTimedOut."""
        return self._wait(step_id, ["SIGNAL", name], timeout)["payload"]

    def wait_jobs(self, step_id: str, job_ids: List[str], timeout: Optional[float] = None) -> Dict[str, Any]:
        """Waits, durably, as step step_id, until every job of job_ids has
        ended; returns {"jobs": {id: {"status", "result"}}} (statuses only,
        with "jobs_truncated": True, past agq's payload limit). Otherwise as
        wait_signal."""
        return self._wait(step_id, ["JOBS", *job_ids], timeout)

    def _wait(self, step_id: str, what: List[str], timeout: Optional[float]) -> Dict[str, Any]:
        if timeout is not None:
            what = what + ["TIMEOUT", _seconds(max(timeout, 1))]
        self._flush_held()
        reply = self._command("STEP.WAIT", step_id, *what)
        if isinstance(reply, str) and reply.startswith("AWAITING "):
            self._end()
            raise Awaiting(step_id, reply[len("AWAITING "):])
        out = json.loads(reply)
        if out.get("timeout"):
            raise WaitTimedOut(step_id, out.get("pending", []))
        return out

    # -- reports ------------------------------------------------------------

    def progress(self, current_task: int, percent: int) -> None:
        """Reports how far the job got (its progress in JOB.GET)."""
        self._update({"current_task": current_task, "progress_percent": percent})

    def acknowledge(self) -> None:
        """Tells agq at once that the job runs. Without it a job running
        longer than the worker's ack_after is acknowledged then; call it
        before work that two workers must not both do: agq gives an
        unacknowledged delivery to another worker after its acknowledgement
        timeout (30 s)."""
        if not self._acked:
            self._update(self._worker._running_doc())

    def log(self, line: str) -> None:
        """Publishes one line of the job's output on job.<id>.logs (kept by
        agq for JOB.LOGS)."""
        call(self._worker._rdb, "PUBLISH", f"job.{self.id}.logs", line)

    def _update(self, doc: Dict[str, Any]) -> None:
        with self._lock:
            self._command("JOB.UPDATE", json.dumps(self._report_doc(doc)), delivery_arg=False)
            self._acked = True

    def _acknowledge(self) -> None:
        """Called by the worker's clock after ack_after: acknowledges a job
        still running, unless it was already."""
        with self._lock:
            if self._final or self._acked:
                return
            self._acked = True
            try:
                self._command("JOB.UPDATE", json.dumps(self._report_doc(self._worker._running_doc())),
                              delivery_arg=False)
            except Exception as e:  # the handler meets the same trouble and reports it
                if not self._stop.is_set():
                    self._worker._log.warning("could not acknowledge job %s: %s", self.id, e)

    def _report_doc(self, doc: Dict[str, Any]) -> Dict[str, Any]:
        doc["delivery"] = self.delivery
        doc["attempt"] = self.attempt
        return doc

    def _command(self, name: str, *args: Any, detached: bool = False, delivery_arg: bool = True) -> Any:
        """Sends a command about this delivery of the job, retrying
        connection trouble (agq answers a repeated call as the first). A
        reply saying the job is no longer this handler's stops the job, and
        raises. detached: go on for a while after the job was told to stop,
        to keep work already done."""
        w = self._worker
        full = (name, self.id) + args + (("DELIVERY", self.delivery) if delivery_arg else ())
        backoff = w._backoff()
        deadline = time.monotonic() + _DETACHED_SECONDS
        while True:
            try:
                if name.startswith("STEP."):
                    return w._step_call(*full)
                return call(w._rdb, *full)
            except Cancelled as e:
                self._interrupt(e, ended=True)
                raise
            except (StaleDelivery, OwnedByAnotherWorker, StepAttemptsUsed) as e:
                self._interrupt(e, ended=True)
                raise
            except WrongStatus as e:
                lost = DeliveryLost(str(e))
                self._interrupt(lost, ended=True)
                raise lost from e
            except NotRegistered as e:
                # agq declared this worker dead meanwhile: once registered
                # again, the command is sent again (and answers whether the
                # job is still this delivery's).
                w._registration_lost()
                if not w._ensure_registered():
                    raise
                err: Exception = e
            except (redis.ConnectionError, redis.TimeoutError, TryAgain) as e:
                if not isinstance(e, ReplyError):
                    w._registration_lost()
                err = e
            if detached and time.monotonic() > deadline or not detached and self._stop.is_set():
                raise err
            pause = backoff.next()
            w._log.warning("%s %s failed: %s; again in %.1fs", name, self.id, err, pause)
            time.sleep(pause)

    def __repr__(self) -> str:
        return f"<agq.Job {self.id} type={self.type!r} attempt={self.attempt}>"


def _seconds(s: float) -> str:
    return repr(max(float(s), 0.001))


@overload
def step(fn: Callable[..., T]) -> Callable[..., Any]: ...
@overload
def step(*, name: Optional[str] = None) -> Callable[[Callable[..., T]], Callable[..., Any]]: ...


def step(fn: Optional[Callable[..., Any]] = None, *, name: Optional[str] = None) -> Any:
    """Makes a function a durable step of whichever job calls it:

        @agq.step
        def charge(order, cents): ...

    Called inside a handler, charge(...) is job.step("charge", charge_fn,
    ...) of the job that thread runs (name= chooses another step id). A
    step id is one step of a job: a loop calls job.step() with an id per
    round instead."""

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        step_id = name or f.__name__

        @functools.wraps(f)
        def run_as_step(*args: Any, **kwargs: Any) -> Any:
            return current_job().step(step_id, f, *args, **kwargs)

        return run_as_step

    return wrap(fn) if fn is not None else wrap


def utcnow() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
