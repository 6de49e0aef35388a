"""agq for Python: workers and producers of agq, the durable job queue that
speaks RESP and keeps its jobs in PostgreSQL.

    worker = agq.Worker("worker-1", key, queues=["emails"])

    @worker.handler("send-email")
    def send(job):
        receipt = job.step("send", mailer.send, job.payload["to"])
        return {"receipt": receipt}

    worker.run()

    with agq.Producer(producer_key) as producer:
        job_id = producer.submit("send-email", {"to": "ada@example.com"}, queue="emails")
        print(producer.wait(job_id, timeout=60).output)

See docs/python.md.
"""
from .errors import (AgqError, Awaiting, AuthenticationFailed, Cancelled, DeliveryLost, NoPermission, NotFinished, NotFound,
                     NotRegistered, OwnedByAnotherWorker, ParentNotFound, Permanent, ReplyError, ShuttingDown,
                     Sleeping, Snooze, StaleDelivery, StepAttemptsUsed, StepFailed, Stopped, TimedOut, TryAgain,
                     WaitTimedOut, WrongStatus, reply_error)
from .job import Job, current_job, step
from .producer import Event, JobInfo, Producer, job_document
from .worker import Worker

__version__ = "0.1.0"

__all__ = [
    "AgqError", "AuthenticationFailed", "Cancelled", "DeliveryLost", "Event", "Job", "JobInfo", "NoPermission",
    "NotFinished", "NotFound", "NotRegistered", "OwnedByAnotherWorker", "ParentNotFound", "Permanent", "Producer",
    "ReplyError", "ShuttingDown", "Awaiting", "WaitTimedOut", "Sleeping", "Snooze", "StaleDelivery", "StepAttemptsUsed", "StepFailed",
    "Stopped", "TimedOut", "TryAgain", "Worker", "WrongStatus", "current_job", "job_document", "reply_error",
    "step",
]
