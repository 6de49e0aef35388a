"""Workers the tests run in processes of their own, to kill or signal them:

    python3 workers.py <kind> <worker_id> <key> <queue>

kind "three-steps": jobs of type three-steps run steps one, two and
three; step two takes 60 s on the worker named by the payload's slow_on,
or while the file named by its hold_while exists.
kind "last-step-waits": jobs of type last-step-waits run steps one, two
and three; step three waits while the file named by the payload's
hold_while exists, and the handler returns as soon as it ends.
kind "slow": jobs of type slow take the payload's seconds, then complete.

WORKER_CONCURRENCY sets the Worker's threads (default 1).
"""
import logging
import os
import sys
import time

import agq

log = logging.getLogger("test-worker")


def main() -> None:
    kind, worker_id, key, queue = sys.argv[1:5]
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
    worker = agq.Worker(worker_id, key, addr=os.environ["AGQ_ADDR"], queues=[queue], shutdown_grace=20,
                        concurrency=int(os.environ.get("WORKER_CONCURRENCY", "1")))

    @worker.handler("three-steps")
    def three_steps(job: agq.Job) -> dict:
        def one(n: int) -> int:
            log.info("step one ran for %s", job.id)
            return n + 1

        def two(n: int) -> int:
            log.info("step two began for %s", job.id)
            hold = job.payload.get("hold_while")
            if job.payload.get("slow_on") == worker_id or hold and os.path.exists(hold):
                time.sleep(60)
            return n * 10

        def three(n: int) -> int:
            log.info("step three ran for %s", job.id)
            return n + 3

        a = job.step("one", one, job.payload["n"])
        b = job.step("two", two, a)
        c = job.step("three", three, b)
        return {"one": a, "two": b, "three": c}

    @worker.handler("last-step-waits")
    def last_step_waits(job: agq.Job) -> str:
        def step(name: str) -> str:
            if name == "three":
                log.info("step three began for %s", job.id)
                while os.path.exists(job.payload["hold_while"]):
                    time.sleep(0.02)
            log.info("step %s ran for %s", name, job.id)
            return f"{name} of {job.id}"

        for name in ("one", "two", "three"):
            job.step(name, step, name)
        return "done"

    @worker.handler("slow")
    def slow(job: agq.Job) -> str:
        log.info("slow job %s started", job.id)
        end = time.monotonic() + job.payload["seconds"]
        while time.monotonic() < end:
            job.check()
            job.wait(0.1)
        log.info("slow job %s finished", job.id)
        return "finished"

    log.info("%s ready", worker_id)
    worker.run()
    log.info("%s exiting", worker_id)


if __name__ == "__main__":
    main()
