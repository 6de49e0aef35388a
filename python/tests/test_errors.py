"""agq's error replies reach callers as exception classes they can tell
apart. Each reply is provoked from the real agq, but TRYAGAIN, which a
healthy agq does not answer on demand."""
import json

import redis

import agq
from tests.support import ADDR, AgqTestCase


class ErrorsTest(AgqTestCase):
    def reply(self, client: redis.Redis, *args) -> Exception:
        """The exception agq's error reply to args becomes."""
        try:
            client.execute_command(*args)
        except redis.ResponseError as e:
            return agq.reply_error(e)
        self.fail(f"{args[0]} succeeded")

    def pop(self, worker: redis.Redis, queue: str) -> dict:
        raw = worker.execute_command("RPOP", f"queue:{queue}")
        self.assertIsNotNone(raw)
        return json.loads(raw)

    def test_unknown_jobs_are_not_found(self):
        producer = self.producer()
        for call in (lambda: producer.get("no-such-job"), lambda: producer.cancel("no-such-job"),
                     lambda: producer.wait("no-such-job", 1)):
            with self.assertRaises(agq.NotFound):
                call()
        with self.assertRaises(agq.ParentNotFound) as caught:
            producer.submit("x", after=["no-such-parent"], queue=self.name("q"))
        self.assertIsInstance(caught.exception, agq.NotFound)
        self.assertIsInstance(caught.exception, redis.ResponseError)  # code catching redis-py's errors still works

    def test_a_finished_job_has_the_wrong_status_for_a_cancel(self):
        producer = self.producer()
        queue = self.name("q")
        job_id = producer.submit("x", queue=queue)
        worker = self.raw_worker(self.name("w"), ["x"])
        job = self.pop(worker, queue)
        worker.execute_command("JOB.UPDATE", job_id, json.dumps({"status": "completed", "delivery": job["delivery"]}))
        with self.assertRaises(agq.WrongStatus) as caught:
            producer.cancel(job_id)
        self.assertEqual(caught.exception.status, "completed")

    def test_reports_about_a_job_another_worker_holds(self):
        queue = self.name("q")
        job_id = self.producer().submit("x", queue=queue)
        holder_id = self.name("holder")
        holder = self.raw_worker(holder_id, ["x"])
        other = self.raw_worker(self.name("other"), ["x"])
        self.pop(holder, queue)
        e = self.reply(other, "JOB.UPDATE", job_id, '{"status":"completed"}')
        self.assertIsInstance(e, agq.OwnedByAnotherWorker)
        self.assertIsInstance(e, agq.DeliveryLost)
        self.assertEqual(e.owner, holder_id)

    def test_a_report_about_an_earlier_delivery_is_stale(self):
        queue = self.name("q")
        job_id = self.producer().submit("x", queue=queue)
        worker_id = self.name("w")
        worker = self.raw_worker(worker_id, ["x"])
        first = self.pop(worker, queue)
        worker.execute_command("JOB.UPDATE", job_id, json.dumps({"status": "running", "delivery": first["delivery"]}))
        # Registering again without the job, as a restarted process would,
        # gives it back to its queue; it is delivered again.
        worker.execute_command("WORKER.REGISTER", json.dumps({
            "worker_id": worker_id, "hostname": "tests", "agw_version": "tests",
            "capabilities": {"tools": [], "types": ["x"]}, "running_jobs": []}))
        second = self.pop(worker, queue)
        self.assertNotEqual(first["delivery"], second["delivery"])
        e = self.reply(worker, "JOB.UPDATE", job_id, json.dumps({"status": "completed", "delivery": first["delivery"]}))
        self.assertIsInstance(e, agq.StaleDelivery)
        e = self.reply(worker, "STEP.BEGIN", job_id, "s", "DELIVERY", first["delivery"])
        self.assertIsInstance(e, agq.StaleDelivery)

    def test_a_cancelled_job_answers_its_holder_cancelled(self):
        queue = self.name("q")
        producer = self.producer()
        job_id = producer.submit("x", queue=queue)
        worker = self.raw_worker(self.name("w"), ["x"])
        job = self.pop(worker, queue)
        producer.cancel(job_id)
        e = self.reply(worker, "JOB.UPDATE", job_id, json.dumps({"current_task": 1, "delivery": job["delivery"]}))
        self.assertIsInstance(e, agq.Cancelled)
        self.assertIsInstance(e, agq.Stopped)
        self.assertEqual(e.code, "CANCELLED")

    def test_workers_unknown_to_agq_and_of_another_key(self):
        lonely = self.name("lonely")
        host, _, port = ADDR.rpartition(":")
        r = redis.Redis(host=host, port=int(port), username=lonely, password=self.key("worker", lonely),
                        decode_responses=True)
        self.addCleanup(r.close)
        self.assertIsInstance(self.reply(r, "WORKER.HEARTBEAT", lonely), agq.NotRegistered)

        # A Worker whose id belongs to another key is refused, and run() says so.
        taken = self.name("taken")
        self.key("worker", taken)
        with self.assertRaises(agq.NoPermission):
            agq.Worker(taken, self.key("worker", self.name("mine")), addr=ADDR).run(install_signal_handlers=False)

    def test_a_wrong_key_fails_authentication(self):
        with self.assertRaises(agq.AuthenticationFailed):
            agq.Producer("0" * 64, addr=ADDR).get("anything")

    def test_try_again_replies_are_told_apart(self):
        # The texts agq answers when its database is unavailable, a command
        # timed out, or it shuts down (commands/errors.go).
        for text in ("TRYAGAIN database unavailable, retry later", "TRYAGAIN command timed out, retry later",
                     "TRYAGAIN server shutting down", "internal error while running 'JOB.SUBMIT'"):
            e = agq.reply_error(redis.ResponseError(text))
            self.assertIsInstance(e, agq.TryAgain, text)
