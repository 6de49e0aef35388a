"""Workers in threads of the test: cancellations, failed attempts,
timeouts and sleeps."""
import threading

import agq
from tests.support import ADDR, AgqTestCase, eventually


class WorkerTest(AgqTestCase):
    def worker(self, queue: str, **options) -> agq.Worker:
        worker_id = self.name("worker")
        return agq.Worker(worker_id, self.key("worker", worker_id), addr=ADDR, queues=[queue], **options)

    def test_a_job_cancelled_while_it_runs_is_told_to_stop_and_ends_cancelled(self):
        # Without job.cancel, the heartbeat's reply is the only messenger.
        for listen in (False, True):
            with self.subTest(listen_for_cancel=listen):
                self.cancel_while_running(listen)

    def cancel_while_running(self, listen: bool) -> None:
        queue = self.name(f"cancel-{listen}".lower())
        worker_id = self.name(f"worker-{listen}".lower())
        worker = agq.Worker(worker_id, self.key("worker", worker_id), addr=ADDR, queues=[queue],
                            listen_for_cancel=listen)
        started, saw = threading.Event(), []

        @worker.handler("loop")
        def loop(job: agq.Job) -> str:
            started.set()
            while not job.wait(0.05):
                pass
            saw.append(job.stop_reason)
            job.check()  # raises the reason
            return "not reached"

        self.start_worker(worker)
        producer = self.producer()
        job_id = producer.submit("loop", queue=queue)
        self.assertTrue(started.wait(20))
        producer.cancel(job_id)

        done = producer.wait(job_id, timeout=20)
        self.assertEqual(done.status, "cancelled", done.raw)
        self.assertEqual(len(saw), 1)
        self.assertIsInstance(saw[0], agq.Cancelled)
        self.assertEqual(done.errors, [])

    def test_a_handler_exception_is_a_failed_attempt_that_is_retried(self):
        queue = self.name("retry")
        worker = self.worker(queue)
        attempts = []

        @worker.handler("flaky")
        def flaky(job: agq.Job) -> dict:
            attempts.append(job.attempt)
            if job.attempt == 1:
                raise RuntimeError("the printer is on fire")
            return {"printed": job.payload["pages"]}

        self.start_worker(worker)
        producer = self.producer()
        job_id = producer.submit("flaky", {"pages": 3}, queue=queue, max_attempts=3, retry_backoff=0.2)
        done = producer.wait(job_id, timeout=30)
        self.assertEqual(done.status, "completed", done.raw)
        self.assertEqual(done.output, {"printed": 3})
        self.assertEqual(attempts, [1, 2])
        self.assertEqual([e["error"] for e in done.errors], ["RuntimeError: the printer is on fire"])

    def test_a_permanent_failure_is_not_retried_until_the_producer_retries_the_job(self):
        queue = self.name("permanent")
        worker = self.worker(queue)
        fixed = threading.Event()

        @worker.handler("strict")
        def strict(job: agq.Job) -> str:
            if not fixed.is_set():
                raise agq.Permanent("the address does not exist")
            return "delivered"

        self.start_worker(worker)
        producer = self.producer()
        job_id = producer.submit("strict", queue=queue, max_attempts=5)
        failed = producer.wait(job_id, timeout=20)
        self.assertEqual(failed.status, "failed", failed.raw)
        self.assertEqual(failed.attempt, 1)
        self.assertEqual([e["error"] for e in failed.errors], ["Permanent: the address does not exist"])

        fixed.set()
        producer.retry(job_id)
        done = producer.wait(job_id, timeout=20)
        self.assertEqual(done.status, "completed", done.raw)
        self.assertEqual(done.output, "delivered")

    def test_a_job_past_its_timeout_is_told_to_stop_and_fails(self):
        queue = self.name("timeout")
        worker = self.worker(queue)
        saw = []

        @worker.handler("stuck")
        def stuck(job: agq.Job) -> None:
            job.wait(30)
            saw.append(job.stop_reason)
            job.check()

        self.start_worker(worker)
        producer = self.producer()
        job_id = producer.submit("stuck", queue=queue, timeout=1, max_attempts=1)
        done = producer.wait(job_id, timeout=20)
        self.assertEqual(done.status, "failed", done.raw)
        self.assertIsInstance(saw[0], agq.TimedOut)
        self.assertTrue(done.errors[0]["error"].startswith("timed out: TimedOut"), done.errors)

    def test_steps_and_a_durable_sleep(self):
        queue = self.name("sleep")
        worker = self.worker(queue)
        ran = []

        @agq.step
        def fetch(url: str) -> dict:
            ran.append("fetch")
            return {"url": url, "bytes": 1024}

        @worker.handler("nap")
        def nap(job: agq.Job) -> dict:
            page = fetch(job.payload["url"])
            job.sleep("cool-down", 1)
            size = job.step("measure", lambda p: (ran.append("measure"), p["bytes"] // 2)[1], page)
            return {"half": size, "page": page}

        self.start_worker(worker)
        producer = self.producer()
        job_id = producer.submit("nap", {"url": "https://example.com"}, queue=queue)
        done = producer.wait(job_id, timeout=30)
        self.assertEqual(done.status, "completed", done.raw)
        self.assertEqual(done.output, {"half": 512, "page": {"url": "https://example.com", "bytes": 1024}})
        self.assertEqual(ran, ["fetch", "measure"])
        steps = self.steps(job_id)
        self.assertEqual(steps["fetch"]["input"], ["https://example.com"])
        self.assertEqual(steps["cool-down"]["kind"], "sleep")
        self.assertEqual(steps["measure"]["status"], "completed")

    def test_a_completed_job_retried_from_a_step(self):
        queue = self.name("rerun")
        worker = self.worker(queue)
        ran = []

        @worker.handler("three-steps")
        def three_steps(job: agq.Job) -> list:
            return [job.step(name, lambda n=name: (ran.append(n), len(ran))[1]) for name in ("fetch", "transform", "load")]

        self.start_worker(worker)
        producer = self.producer()
        job_id = producer.submit("three-steps", queue=queue)
        self.assertEqual(producer.wait(job_id, timeout=30).output, [1, 2, 3])
        with self.assertRaises(agq.AgqError) as refused:
            producer.retry(job_id, from_step="nope")
        self.assertIn("step nope was not begun", str(refused.exception))
        producer.retry(job_id, from_step="transform")
        done = producer.wait(job_id, timeout=30)
        self.assertEqual(done.status, "completed", done.raw)
        self.assertEqual(done.output, [1, 4, 5])
        self.assertEqual(ran, ["fetch", "transform", "load", "transform", "load"])
        statuses = [(s["step_id"], s["status"]) for s in producer.steps(job_id)]
        self.assertEqual(statuses, [("fetch", "completed"), ("transform", "replaced"), ("load", "replaced"),
                                    ("transform", "completed"), ("load", "completed")])

    def test_step_completions_ride_on_the_next_call(self):
        queue = self.name("riding")
        worker = self.worker(queue)
        between, release = threading.Event(), threading.Event()

        @worker.handler("three")
        def three(job: agq.Job) -> list:
            return [job.step(name, lambda n=n: n) for n, name in enumerate(("one", "two", "three"), 1)]

        @worker.handler("slow")
        def slow(job: agq.Job) -> str:
            first = job.step("first", lambda: "done")
            between.set()
            release.wait(30)
            return first + " " + job.step("second", lambda: "too")

        self.start_worker(worker)
        producer = self.producer()
        before = self.command_counts()
        ids = [producer.submit("three", queue=queue) for _ in range(2)]
        for job_id in ids:
            done = producer.wait(job_id, timeout=30)
            self.assertEqual(done.status, "completed", done.raw)
            self.assertEqual(done.output, [1, 2, 3])
            steps = self.steps(job_id)
            self.assertEqual([(s, steps[s]["status"], steps[s]["output"]) for s in ("one", "two", "three")],
                             [("one", "completed", 1), ("two", "completed", 2), ("three", "completed", 3)])
        after = self.command_counts()
        # Each job's second and third steps began with the completions
        # before them (STEP.COMPLETE ... NEXT); the last rode on the report.
        self.assertEqual(after.get("step.begin", 0) - before.get("step.begin", 0), 2)
        self.assertEqual(after.get("step.complete", 0) - before.get("step.complete", 0), 6)

        # A handler that goes on slowly has its step kept meanwhile.
        job_id = producer.submit("slow", queue=queue)
        self.assertTrue(between.wait(30))
        eventually(lambda: self.steps(job_id).get("first", {}).get("status") == "completed", 5,
                   "the first step is not completed while its handler goes on")
        release.set()
        done = producer.wait(job_id, timeout=30)
        self.assertEqual(done.output, "done too", done.raw)

    def test_a_failing_step_is_retried_alone(self):
        queue = self.name("stepfail")
        worker = self.worker(queue)
        calls = {"first": 0, "second": 0}

        def first() -> str:
            calls["first"] += 1
            return "kept"

        def second() -> str:
            calls["second"] += 1
            if calls["second"] == 1:
                raise ConnectionError("the carrier's API timed out")
            return "booked"

        @worker.handler("two-steps")
        def two_steps(job: agq.Job) -> list:
            return [job.step("first", first), job.step("second", second)]

        self.start_worker(worker)
        producer = self.producer()
        job_id = producer.submit("two-steps", queue=queue, retry_backoff=0.2)
        done = producer.wait(job_id, timeout=30)
        self.assertEqual(done.status, "completed", done.raw)
        self.assertEqual(done.output, ["kept", "booked"])
        self.assertEqual(calls, {"first": 1, "second": 2})
        steps = self.steps(job_id)
        self.assertEqual(steps["second"]["attempts"], 2)
        self.assertEqual([e["error"] for e in steps["second"]["errors"]], ["ConnectionError: the carrier's API timed out"])
        history = steps["second"]["history"]
        self.assertEqual([(a["attempt"], a["outcome"]) for a in history], [(1, "failed"), (2, "completed")])
        self.assertEqual(history[0]["error"], "ConnectionError: the carrier's API timed out")

    def test_many_slots_take_their_jobs_in_batches(self):
        queue = self.name("batch")
        worker = self.worker(queue, concurrency=8)
        seen = []
        lock = threading.Lock()

        @worker.handler("square")
        def square(job: agq.Job) -> int:
            with lock:
                seen.append(job.id)
            return job.payload * job.payload

        producer = self.producer()
        ids = producer.submit_many([{"type": "square", "payload": n, "queue": queue} for n in range(40)])
        self.start_worker(worker)
        outputs = [producer.wait(i, timeout=30).output for i in ids]
        self.assertEqual(outputs, [n * n for n in range(40)])
        self.assertEqual(sorted(seen), sorted(ids))
        eventually(lambda: worker.stats()["active_jobs"] == 0, 5, "every report answered")
        self.assertEqual(worker.stats()["completed_jobs_total"], 40)

    def test_a_wait_for_a_signal_and_for_spawned_jobs(self):
        queue = self.name("waits")
        worker = self.worker(queue)
        producer = self.producer()
        runs = []

        @worker.handler("child")
        def child(job: agq.Job) -> int:
            return job.payload * 2

        @worker.handler("approve")
        def approve(job: agq.Job) -> dict:
            runs.append(job.attempt)
            approval = job.wait_signal("approval", "approve", timeout=3600)
            kids = job.step("spawn", lambda: [producer.submit("child", n, queue=queue, job_id=f"{job.id}-{n}")
                                              for n in (1, 2)])
            done = job.wait_jobs("children", kids)
            return {"by": approval["by"], "children": sorted(j["status"] for j in done["jobs"].values())}

        self.start_worker(worker)
        job_id = producer.submit("approve", None, queue=queue)
        eventually(lambda: producer.get(job_id).status == "awaiting", 10, "the job awaiting")
        producer.signal(job_id, "approve", {"by": "ann"}, signal_id="a-1")
        producer.signal(job_id, "approve", {"by": "ann"}, signal_id="a-1")
        done = producer.wait(job_id, timeout=30)
        self.assertEqual(done.status, "completed", done.raw)
        self.assertEqual(done.output, {"by": "ann", "children": ["completed", "completed"]})
        steps = self.steps(job_id)
        self.assertEqual(steps["approval"]["kind"], "wait")
        self.assertEqual(steps["children"]["status"], "completed")
