"""What the tests share: the agq they run against (AGQ_ADDR, AGQ_ADMIN_KEY,
set by e2e/python_test.go), keys, workers in threads and in processes of
their own, and polling with a deadline."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
import unittest
import urllib.request
import uuid
from typing import Any, Callable, List, Optional, TypeVar

import redis

import agq

ADDR = os.environ.get("AGQ_ADDR", "")
HTTP_ADDR = os.environ.get("AGQ_HTTP_ADDR", "")
ADMIN_KEY = os.environ.get("AGQ_ADMIN_KEY", "")
HERE = os.path.dirname(os.path.abspath(__file__))

T = TypeVar("T")

logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                    format="%(asctime)s %(threadName)s %(name)s %(message)s")


class AgqTestCase(unittest.TestCase):
    """A test against the agq named by the environment."""

    def setUp(self) -> None:
        if not ADDR or not ADMIN_KEY:
            self.fail("AGQ_ADDR and AGQ_ADMIN_KEY must name the agq to test against (go test ./e2e -run Python)")
        host, _, port = ADDR.rpartition(":")
        self.admin = redis.Redis(host=host, port=int(port), password=ADMIN_KEY, decode_responses=True)
        self.addCleanup(self.admin.close)
        self.suffix = uuid.uuid4().hex[:8]

    def name(self, prefix: str) -> str:
        """A name no other test uses (queues, worker ids, job ids)."""
        return f"{prefix}-{self.suffix}"

    def key(self, role: str, principal: str) -> str:
        return str(self.admin.execute_command("KEY.CREATE", role, principal))

    def producer(self) -> agq.Producer:
        p = agq.Producer(self.key("producer", self.name("producer")), addr=ADDR)
        self.addCleanup(p.close)
        return p

    def raw_worker(self, worker_id: str, types: List[str]) -> redis.Redis:
        """A registered worker that speaks the protocol itself."""
        host, _, port = ADDR.rpartition(":")
        r = redis.Redis(host=host, port=int(port), username=worker_id, password=self.key("worker", worker_id),
                        decode_responses=True)
        self.addCleanup(r.close)
        r.execute_command("WORKER.REGISTER", json.dumps({
            "worker_id": worker_id, "hostname": "tests", "agw_version": "tests",
            "capabilities": {"tools": [], "types": types}}))
        return r

    def steps(self, job_id: str) -> dict:
        """The job's steps by id, as JOB.STEPS shows them."""
        return {s["step_id"]: s for s in json.loads(self.admin.execute_command("JOB.STEPS", job_id))}

    def command_counts(self) -> dict:
        """The commands agq ran, by lower-case name (agq_commands_total)."""
        counts: dict = {}
        with urllib.request.urlopen(f"http://{HTTP_ADDR}/metrics", timeout=10) as res:
            for line in res.read().decode().splitlines():
                if not line.startswith("agq_commands_total{"):
                    continue
                name = line.split('command="', 1)[1].split('"', 1)[0].lower()
                counts[name] = counts.get(name, 0) + int(float(line.rsplit(" ", 1)[1]))
        return counts

    def job(self, job_id: str) -> dict:
        raw = self.admin.execute_command("JOB.GET", job_id)
        self.assertIsNotNone(raw, f"no job {job_id}")
        return json.loads(raw)

    def start_worker(self, worker: agq.Worker) -> "ThreadWorker":
        w = ThreadWorker(worker)
        self.addCleanup(w.stop)
        return w

    def start_process(self, *args: str) -> "WorkerProcess":
        p = WorkerProcess(list(args))
        self.addCleanup(p.kill)
        return p


class ThreadWorker:
    """A Worker running in a thread of the test."""

    def __init__(self, worker: agq.Worker) -> None:
        self.worker = worker
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, name=worker.worker_id, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.worker.run(install_signal_handlers=False)
        except BaseException as e:
            self.error = e

    def stop(self, within: float = 30) -> None:
        self.worker.stop()
        self.thread.join(within)
        if self.thread.is_alive():
            raise AssertionError(f"worker {self.worker.worker_id} did not stop within {within}s")


class WorkerProcess:
    """python3 tests/workers.py <args>: a worker in a process of its own,
    whose output is kept line by line and copied to stderr."""

    def __init__(self, args: List[str]) -> None:
        self.name = args[1] if len(args) > 1 else args[0]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "workers.py")] + args, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: List[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            sys.stderr.write(f"  {self.name} | {line}\n")
            with self._lock:
                self.lines.append(line)

    def count(self, text: str) -> int:
        with self._lock:
            return sum(text in line for line in self.lines)

    def wait_log(self, text: str, within: float) -> None:
        def logged() -> bool:
            if self.count(text):
                return True
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited ({self.proc.returncode}) before logging {text!r}")
            return False
        eventually(logged, within, f"{self.name} logged {text!r}")

    def wait_exit(self, within: float) -> int:
        code = self.proc.wait(within)
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def eventually(cond: Callable[[], Any], within: float, what: str) -> Any:
    """Polls cond until it returns something true, failing after within
    seconds."""
    deadline = time.monotonic() + within
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        time.sleep(0.05)
