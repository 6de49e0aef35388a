"""agq's error replies as exception classes, and the exceptions a handler
meets or raises.

Every error reply of agq reaches the caller as a ReplyError (itself a
redis.ResponseError, so that code catching redis-py's errors keeps working),
of the subclass its code and text name. reply_error() makes the translation,
in this one place.
"""
from __future__ import annotations

import re
import redis


class AgqError(Exception):
    """The base of every exception of this package."""


class ReplyError(AgqError, redis.ResponseError):
    """An error reply of agq. code is its first word ("ERR", "CANCELLED",
    "NOPERM", "TRYAGAIN", ...), message the text after it."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message


class NotFound(ReplyError):
    """agq does not know the job (``ERR no such job <id>``, or a job.get()
    of an unknown id)."""


class ParentNotFound(NotFound):
    """A job named in ``after`` does not exist."""


class NoPermission(ReplyError):
    """``NOPERM``: this key may not do it (a worker id of another key, a
    channel it may not hear, a job it does not hold)."""


class AuthenticationFailed(ReplyError):
    """``WRONGPASS`` or ``NOAUTH``: the key is wrong, or none was given."""


class TryAgain(ReplyError):
    """agq could not do it now and nothing was changed: ``TRYAGAIN`` (its
    database unavailable, a command timed out, agq shutting down),
    ``LOADING``, ``BUSY``, or an internal error. Send the same command
    again later."""


class NotRegistered(ReplyError):
    """``ERR Worker not registered: <id>``: the worker registers again."""


class WrongStatus(ReplyError):
    """``ERR job <id> is <status>``: the job is not in a status that allows
    it (cancelling a completed job, reporting on a job that is not running).
    status is that status."""

    def __init__(self, code: str, message: str, status: str) -> None:
        super().__init__(code, message)
        self.status = status


class Stopped(AgqError):
    """The job's handler should stop: raised by Job.check() and by the
    job's commands once the job is no longer this handler's to run."""


class Cancelled(ReplyError, Stopped):
    """The job was cancelled (``CANCELLED job <id> was cancelled``, or a
    cancellation agq announced to the worker)."""


class TimedOut(Stopped):
    """The job ran past its timeout_seconds."""


class ShuttingDown(Stopped):
    """The worker stops, and its drain's grace has run out."""


class DeliveryLost(Stopped):
    """agq no longer gives this delivery of the job to this worker: it was
    delivered again, it is owned by another worker, or it is not running."""


class StaleDelivery(ReplyError, DeliveryLost):
    """``ERR job <id> is not running for this delivery token …`` or ``ERR job
    <id> is at attempt <current>, not <n>``: a report about an earlier
    delivery (or naming a token agq never issued)."""


class OwnedByAnotherWorker(ReplyError, DeliveryLost):
    """``ERR job <id> is owned by <worker>``; owner names that worker."""

    def __init__(self, code: str, message: str, owner: str) -> None:
        super().__init__(code, message)
        self.owner = owner


class StepAttemptsUsed(ReplyError, Stopped):
    """``ERR step <id> used its <n> attempts: the job failed``: a step begun
    past its attempts failed its job."""


class Sleeping(Stopped):
    """Job.sleep() put the job to sleep: the handler lets it propagate, and
    agq delivers the job again at wake_at (RFC 3339)."""

    def __init__(self, step_id: str, wake_at: str) -> None:
        super().__init__(f"step {step_id}: sleeping until {wake_at}")
        self.step_id = step_id
        self.wake_at = wake_at


class Awaiting(Stopped):
    """Job.wait_signal() or Job.wait_jobs() put the job to wait: the handler
    lets it propagate, and agq delivers the job again when the wait ends.
    deadline is RFC 3339, or "never"."""

    def __init__(self, step_id: str, deadline: str) -> None:
        super().__init__(f"step {step_id}: awaiting until {deadline}")
        self.step_id = step_id
        self.deadline = deadline


class WaitTimedOut(AgqError, TimeoutError):
    """A wait's deadline passed first; pending names the awaited jobs not
    ended by then (Job.wait_jobs)."""

    def __init__(self, step_id: str, pending: list) -> None:
        super().__init__(f"step {step_id}: the wait timed out")
        self.step_id = step_id
        self.pending = pending


class StepFailed(Stopped):
    """A step's function raised; agq recorded the failure and ended this
    delivery (the job is retried from that step, or failed). The function's
    exception is __cause__."""

    def __init__(self, step_id: str, error: BaseException, retry: bool) -> None:
        super().__init__(f"step {step_id} failed: {describe(error)}")
        self.step_id = step_id
        self.retry = retry


class NotFinished(AgqError, TimeoutError):
    """Producer.wait(): the job did not end within the timeout."""


class Permanent(Exception):
    """Raised by a handler or a step, a failure that is not worth retrying:
    the job fails at once, whatever attempts remain. Any exception with an
    attribute ``non_retryable = True`` counts as permanent too."""

    non_retryable = True


class Snooze(Exception):
    """Raised by a handler, puts the job back for seconds without counting
    the attempt."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"snoozed for {seconds}s")
        self.seconds = seconds


def is_permanent(error: BaseException) -> bool:
    """Whether error marks its failure as not worth retrying."""
    return bool(getattr(error, "non_retryable", False))


def describe(error: BaseException) -> str:
    """An exception as a failure's message: its type, and its text if any."""
    text = str(error)
    name = type(error).__name__
    return f"{name}: {text}" if text else name


_TRANSIENT_CODES = ("TRYAGAIN", "LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN")
_CODES = _TRANSIENT_CODES + ("CANCELLED", "NOPERM", "WRONGPASS", "NOAUTH")
_OWNED = re.compile(r"^job \S+ is owned by (\S+)$")
_STATUS = re.compile(r"^job \S+ is (not running|\w+)$")


def _code_and_message(error: redis.RedisError) -> "tuple[str, str]":
    text = str(error)
    # redis-py strips the codes it knows and gives them classes of their own.
    if isinstance(error, redis.exceptions.NoPermissionError):
        return "NOPERM", text
    if isinstance(error, redis.exceptions.BusyLoadingError):
        return "LOADING", text
    if isinstance(error, redis.exceptions.AuthenticationError):
        return "NOAUTH", text
    first, _, rest = text.partition(" ")
    if first in _CODES:
        return first, rest
    return "ERR", text


def reply_error(error: redis.RedisError) -> ReplyError:
    """The ReplyError subclass of one of agq's error replies (a
    redis.ResponseError, or the redis.AuthenticationError redis-py makes of
    NOAUTH)."""
    if isinstance(error, ReplyError):
        return error
    code, msg = _code_and_message(error)
    if code == "CANCELLED":
        return Cancelled(code, msg)
    if code == "NOPERM":
        return NoPermission(code, msg)
    if code in ("WRONGPASS", "NOAUTH"):
        return AuthenticationFailed(code, msg)
    if code in _TRANSIENT_CODES or msg.startswith("internal error"):
        return TryAgain(code, msg)
    if msg.startswith("Worker not registered"):
        return NotRegistered(code, msg)
    if " was delivered again " in msg or " is not running for this delivery " in msg or " is at attempt " in msg:
        return StaleDelivery(code, msg)
    if msg.startswith("step ") and msg.endswith("attempts: the job failed"):
        return StepAttemptsUsed(code, msg)
    if msg.startswith("no such job "):
        return NotFound(code, msg)
    if "named in after does not exist" in msg:
        return ParentNotFound(code, msg)
    m = _OWNED.match(msg)
    if m:
        return OwnedByAnotherWorker(code, msg, m.group(1))
    m = _STATUS.match(msg)
    if m:
        return WrongStatus(code, msg, m.group(1))
    return ReplyError(code, msg)


def translate(error: redis.RedisError) -> ReplyError:
    """reply_error(), keeping redis-py's exception as the cause."""
    mapped = reply_error(error)
    if mapped is not error:
        mapped.__cause__ = error
    return mapped


def not_found(job_id: str) -> NotFound:
    return NotFound("ERR", f"no such job {job_id}")
