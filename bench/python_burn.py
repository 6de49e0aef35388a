"""python_burn.py: the Python workers of the benchmark's burn-down rows.

    python3 python_burn.py package|steps|loop

"package" is one agq.Worker of the Python package (PYTHON_SLOTS slots, a
no-op handler); "steps" is the same worker whose handler runs three
job.step calls; "loop" is the hand-written redis-py worker of one job at a
time: BRPOP, then JOB.UPDATE completed. Both work queue BENCH_QUEUE until
SIGTERM; AGQ_ADDR, AGQ_WORKER_ID and AGQ_KEY say where and who.
"""
import json
import os
import sys
import threading
import time

import redis

addr, worker_id, key = os.environ["AGQ_ADDR"], os.environ["AGQ_WORKER_ID"], os.environ["AGQ_KEY"]
queue = os.environ["BENCH_QUEUE"]


def package(steps: int = 0) -> None:
    import agq

    worker = agq.Worker(worker_id, key, addr=addr, queues=[queue], concurrency=int(os.environ["PYTHON_SLOTS"]),
                        pop_timeout=1)

    def handle(job: agq.Job) -> None:
        for i in range(steps):
            job.step(f"step-{i}", lambda: True)

    worker.handle("bench", handle)
    worker.run()


def loop() -> None:
    host, _, port = addr.rpartition(":")
    r = redis.Redis(host=host, port=int(port), username=worker_id, password=key, decode_responses=True)
    reply = r.execute_command("WORKER.REGISTER", json.dumps({
        "worker_id": worker_id, "hostname": "bench", "agw_version": "bench",
        "capabilities": {"tools": [], "types": ["bench"]}}))
    every = float(reply.partition("heartbeat_interval=")[2] or 30)

    def heartbeat() -> None:
        while True:
            time.sleep(every)
            r.execute_command("WORKER.HEARTBEAT", worker_id)

    threading.Thread(target=heartbeat, daemon=True).start()
    while True:
        popped = r.brpop(f"queue:{queue}", timeout=1)
        if popped is None:
            continue
        job = json.loads(popped[1])
        report = {"status": "completed", "output": None, "delivery": job["delivery"]}
        r.execute_command("JOB.UPDATE", job["job_id"], json.dumps(report))


if __name__ == "__main__":
    {"package": package, "steps": lambda: package(3), "loop": loop}[sys.argv[1]]()
