"""The producer: submit jobs and graphs of jobs, read, wait for, cancel,
retry and follow them."""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional

import redis

from ._conn import DEFAULT_ADDR, call, connect
from .errors import NotFinished, not_found

_FINISHED = ("completed", "failed", "cancelled")

# submit()'s keyword arguments and the JOB.SUBMIT fields they set; the
# protocol's own names are accepted too.
_FIELDS = {
    "job_id": "job_id", "queue": "queue", "type": "type", "requires": "requires", "plan": "plan",
    "inputs": "inputs", "payload": "payload", "priority": "priority", "max_attempts": "max_attempts",
    "retry_backoff": "retry_backoff_seconds", "retry_backoff_seconds": "retry_backoff_seconds",
    "timeout": "timeout_seconds", "timeout_seconds": "timeout_seconds",
    "delay": "delay_seconds", "delay_seconds": "delay_seconds", "run_at": "run_at",
    "unique_key": "unique_key", "after": "after", "on_parent_failure": "on_parent_failure",
    "traceparent": "traceparent", "tracestate": "tracestate",
    # Fair share inside a queue: needs a server with §6g of the protocol.
    "fair_key": "fair_key", "fair_weight": "fair_weight",
}


def job_document(**fields: Any) -> Dict[str, Any]:
    """The JOB.SUBMIT object of submit()'s keyword arguments; None leaves a
    field to agq's default. A name it does not know raises TypeError."""
    doc: Dict[str, Any] = {}
    for name, value in fields.items():
        if name not in _FIELDS:
            raise TypeError(f"unknown job field {name!r}")
        if value is None:
            continue
        if name == "run_at" and isinstance(value, datetime):
            if value.tzinfo is None:
                raise ValueError("run_at needs a timezone")
            value = value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
        if name in ("after", "requires"):
            value = list(value)
        doc[_FIELDS[name]] = value
    return doc


class JobInfo:
    """A job as JOB.GET and JOB.WAIT show it. raw is the whole object; the
    attributes are its common fields."""

    def __init__(self, raw: Dict[str, Any]) -> None:
        self.raw = raw
        self.namespace: str = raw.get("namespace") or "default"
        self.id: str = raw.get("job_id", "")
        self.status: str = raw.get("status", "")
        self.queue: str = raw.get("queue", "")
        self.type: str = raw.get("type") or ""
        self.attempt: int = int(raw.get("attempt") or 0)
        self.worker_id: Optional[str] = raw.get("worker_id")
        self.payload: Any = raw.get("payload")
        self.result: Any = raw.get("result")
        self.errors: List[Dict[str, Any]] = raw.get("errors") or []
        self.steps: int = int(raw.get("steps") or 0)
        self.after: List[str] = raw.get("after") or []
        self.fair_key: str = raw.get("fair_key") or ""
        self.fair_weight: int = int(raw.get("fair_weight") or 1)

    @property
    def output(self) -> Any:
        """The output its handler returned, when it completed."""
        return self.result.get("output") if isinstance(self.result, dict) else None

    @property
    def finished(self) -> bool:
        """Whether the job has ended: completed, failed or cancelled."""
        return self.status in _FINISHED

    def __repr__(self) -> str:
        return f"<agq.JobInfo {self.id} {self.status} attempt={self.attempt}>"


class Event:
    """One transition of a job, from job.<id>.status: event (submitted,
    started, completed, failed, retrying, cancelled, step_completed, ...),
    the status it left the job in, attempt, worker_id, step_id, at."""

    def __init__(self, raw: Dict[str, Any]) -> None:
        self.raw = raw
        self.job_id: str = raw.get("job_id", "")
        self.queue: str = raw.get("queue", "")
        self.event: str = raw.get("event", "")
        self.status: str = raw.get("status", "")
        self.attempt: int = int(raw.get("attempt") or 0)
        self.worker_id: Optional[str] = raw.get("worker_id")
        self.step_id: Optional[str] = raw.get("step_id")
        self.at: Optional[str] = raw.get("at")

    @property
    def finished(self) -> bool:
        """Whether the event ends the job."""
        return self.status in _FINISHED

    def __repr__(self) -> str:
        return f"<agq.Event {self.job_id} {self.event} {self.status}>"


class Producer:
    """Submits, reads and controls jobs, with a producer's (or an admin's)
    key. Thread-safe; a context manager that closes its connections."""

    def __init__(self, key: str, *, addr: str = DEFAULT_ADDR, principal: Optional[str] = None,
                 namespace: Optional[str] = None, redis_options: Optional[Dict[str, Any]] = None) -> None:
        """namespace: where a cluster admin's key acts (None: the key's own
        namespace, or default for a cluster key)."""
        # JOB.WAIT blocks as long as asked: no read timeout.
        self._rdb = connect(addr, principal, key, socket_timeout=None, options=redis_options,
                            namespace=namespace)

    def close(self) -> None:
        self._rdb.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def submit(self, type: Optional[str] = None, payload: Any = None, **fields: Any) -> str:
        """Submits one job and returns its id. fields: job_id (the
        idempotency key: the same id again is the same job), queue,
        requires, priority, max_attempts, retry_backoff and timeout
        (seconds), delay (seconds) or run_at (an aware datetime),
        unique_key, after (ids of jobs that must end first),
        on_parent_failure, plan, inputs, traceparent, tracestate, and
        fair_key / fair_weight (the customer the job is for, served its
        share of the queue beside the others)."""
        doc = job_document(type=type, payload=payload, **fields)
        return str(call(self._rdb, "JOB.SUBMIT", json.dumps(doc)))

    def submit_many(self, jobs: Iterable[Mapping[str, Any]]) -> List[str]:
        """Submits jobs, each a mapping of submit()'s arguments, in one
        JOB.SUBMIT: one transaction, all or none. A job may name in after
        the job_ids of jobs before it, so that a whole graph goes in one
        call. Returns the ids in order."""
        docs = [job_document(**dict(j)) for j in jobs]
        return [str(i) for i in call(self._rdb, "JOB.SUBMIT", json.dumps(docs))]

    def get(self, job_id: str) -> JobInfo:
        """Reads a job; NotFound when agq does not know it."""
        raw = call(self._rdb, "JOB.GET", job_id)
        if raw is None:
            raise not_found(job_id)
        return JobInfo(json.loads(raw))

    def wait(self, job_id: str, timeout: Optional[float] = None) -> JobInfo:
        """Waits up to timeout seconds (None: as long as it takes) for the
        job to end and returns it; NotFinished when it did not end in time,
        NotFound when agq does not know it."""
        raw = call(self._rdb, "JOB.WAIT", job_id, repr(float(timeout or 0)))
        if raw is None:
            raise NotFinished(f"job {job_id} did not end within {timeout}s")
        return JobInfo(json.loads(raw))

    def cancel(self, job_id: str) -> None:
        """Cancels a job: at once when it waits; through its worker when it
        runs (JOB.WAIT then answers once the worker stopped it)."""
        call(self._rdb, "JOB.CANCEL", job_id)

    def signal(self, job_id: str, name: str, payload: Any = None, signal_id: Optional[str] = None) -> None:
        """Sends the signal name with payload (any JSON value) to a job,
        ending its wait for it (Job.wait_signal). A signal_id makes the
        signal one however often it is sent, so the call may be repeated
        after an error."""
        args = ["JOB.SIGNAL", job_id, name, json.dumps(payload)]
        if signal_id is not None:
            args += ["ID", signal_id]
        call(self._rdb, *args)

    def retry(self, job_id: str, from_step: Optional[str] = None) -> None:
        """Puts a failed or cancelled job back, with fresh attempts and its
        completed steps kept. With from_step, a failed, cancelled or
        completed job runs again from that step (JOB.RETRY ... FROM): the
        step and every step begun after it run again, the steps before it
        keep their outputs."""
        if from_step is None:
            call(self._rdb, "JOB.RETRY", job_id)
        else:
            call(self._rdb, "JOB.RETRY", job_id, "FROM", from_step)

    def steps(self, job_id: str) -> List[Dict[str, Any]]:
        """The job's durable steps and sleeps (JOB.STEPS), in the order first begun."""
        return list(json.loads(call(self._rdb, "JOB.STEPS", job_id)))

    def signal(self, job_id: str, name: str, payload: Any = None, *, signal_id: Optional[str] = None) -> None:
        """Sends the job a signal a step may wait for (JOB.SIGNAL); with
        signal_id, sending it again stores it once. Needs a server with
        waits and signals (§6h of the protocol)."""
        args: List[Any] = ["JOB.SIGNAL", job_id, name, json.dumps(payload)]
        if signal_id is not None:
            args += ["ID", signal_id]
        call(self._rdb, *args)

    def follow(self, job_id: str, timeout: Optional[float] = None) -> Iterator[Event]:
        """Subscribes to the job's events and returns them as they happen:
        the iterator ends after the event that ends the job. A job that has
        ended already gives one event, its status. Past timeout seconds
        (None: no limit), the iterator raises NotFinished. Nothing is missed
        between follow() returning and the first next()."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pubsub = self._rdb.pubsub()
        try:
            pubsub.subscribe(f"job.{job_id}.status")
            # Subscribed once agq confirms: what the job did before is in
            # JOB.GET, what it does from then on comes as messages.
            while True:
                m = pubsub.get_message(timeout=_left(deadline, job_id))
                if m and m.get("type") == "subscribe":
                    break
            info = self.get(job_id)
        except BaseException:
            pubsub.close()
            raise
        return self._events(pubsub, info, deadline)

    def _events(self, pubsub: Any, info: JobInfo, deadline: Optional[float]) -> Iterator[Event]:
        try:
            if info.finished:
                yield Event({"job_id": info.id, "queue": info.queue, "event": info.status, "status": info.status,
                             "attempt": info.attempt, "worker_id": info.worker_id})
                return
            while True:
                m = pubsub.get_message(timeout=_left(deadline, info.id))
                if not m or m.get("type") != "message":
                    continue
                try:
                    event = Event(json.loads(m["data"]))
                except (ValueError, TypeError):
                    continue
                yield event
                if event.finished:
                    return
        finally:
            try:
                pubsub.close()
            except redis.RedisError:
                pass


def _left(deadline: Optional[float], job_id: str) -> float:
    if deadline is None:
        return 1.0
    left = deadline - time.monotonic()
    if left <= 0:
        raise NotFinished(f"job {job_id} did not end in time")
    return min(left, 1.0)
