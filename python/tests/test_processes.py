"""Workers in processes of their own, killed and drained."""
import json
import os
import tempfile

from tests.support import AgqTestCase, eventually


class KilledWorkerTest(AgqTestCase):
    def test_a_job_whose_worker_is_killed_in_a_step_resumes_elsewhere_without_redoing_done_steps(self):
        queue, job_id = self.name("steps"), self.name("job")
        first_id, second_id = self.name("first"), self.name("second")
        first = self.start_process("three-steps", first_id, self.key("worker", first_id), queue)
        producer = self.producer()
        producer.submit("three-steps", {"n": 4, "slow_on": first_id}, job_id=job_id, queue=queue)

        first.wait_log(f"step two began for {job_id}", 20)
        first.proc.kill()  # SIGKILL: no drain, no unregistration
        first.wait_exit(5)
        steps = self.steps(job_id)
        self.assertEqual(steps["one"]["status"], "completed")
        self.assertEqual(steps["two"]["status"], "running")
        self.assertNotIn("three", steps)

        second = self.start_process("three-steps", second_id, self.key("worker", second_id), queue)
        done = producer.wait(job_id, timeout=30)
        self.assertEqual(done.status, "completed", done.raw)
        self.assertEqual(done.worker_id, second_id)
        self.assertEqual(done.output, {"one": 5, "two": 50, "three": 53})

        steps = self.steps(job_id)
        for step_id, attempts in {"one": 1, "two": 2, "three": 1}.items():
            self.assertEqual(steps[step_id]["status"], "completed", steps[step_id])
            self.assertEqual(steps[step_id]["attempts"], attempts, steps[step_id])
        self.assertEqual(first.count(f"step one ran for {job_id}"), 1)
        self.assertEqual(first.count(f"step three ran for {job_id}"), 0)
        self.assertEqual(second.count(f"step one ran for {job_id}"), 0)
        self.assertEqual(second.count(f"step one of {job_id}: done in an earlier delivery"), 1)
        self.assertEqual(second.count(f"step two began for {job_id}"), 1)
        self.assertEqual(second.count(f"step three ran for {job_id}"), 1)


class RestartedWorkerTest(AgqTestCase):
    def test_a_worker_restarted_with_the_same_id_takes_back_at_once_the_job_its_killed_process_held(self):
        queue, job_id, worker_id = self.name("restart"), self.name("job"), self.name("worker")
        key = self.key("worker", worker_id)
        first = self.start_process("three-steps", worker_id, key, queue)
        producer = self.producer()
        hold = os.path.join(tempfile.mkdtemp(), "hold")
        open(hold, "w").close()
        producer.submit("three-steps", {"n": 1, "hold_while": hold}, job_id=job_id, queue=queue)
        first.wait_log(f"step two began for {job_id}", 20)
        first.proc.kill()
        first.wait_exit(5)
        os.remove(hold)

        # The new process registers with running_jobs []: agq gives the job
        # its earlier process held back to its queue at once, and this
        # worker, the only one, takes it again.
        second = self.start_process("three-steps", worker_id, key, queue)
        done = producer.wait(job_id, timeout=30)
        self.assertEqual(done.status, "completed", done.raw)
        self.assertEqual(done.output, {"one": 2, "two": 20, "three": 23})
        self.assertIn(f"worker {worker_id} restarted without it", json.dumps(done.errors))
        self.assertEqual(second.count(f"step one of {job_id}: done in an earlier delivery"), 1)


class DrainTest(AgqTestCase):
    def test_sigterm_lets_the_running_job_finish_then_the_worker_unregisters_and_exits(self):
        queue, job_id, worker_id = self.name("drain"), self.name("job"), self.name("worker")
        worker = self.start_process("slow", worker_id, self.key("worker", worker_id), queue)
        producer = self.producer()
        producer.submit("slow", {"seconds": 3}, job_id=job_id, queue=queue)
        worker.wait_log(f"slow job {job_id} started", 20)

        worker.proc.terminate()  # SIGTERM
        later = producer.submit("slow", {"seconds": 0}, job_id=self.name("later"), queue=queue)
        self.assertEqual(worker.wait_exit(30), 0)

        done = producer.get(job_id)
        self.assertEqual(done.status, "completed", done.raw)
        self.assertEqual(done.output, "finished")
        self.assertEqual(done.attempt, 1)
        self.assertEqual(worker.count(f"slow job {job_id} finished"), 1)
        self.assertEqual(worker.count("unregistered"), 1)
        self.assertIn(worker_id, self.admin.execute_command("WORKER.LIST", "UNREGISTERED"))
        # Submitted during the drain, it waits for another worker.
        self.assertEqual(producer.get(later).status, "queued")
        self.assertEqual(worker.count(f"slow job {later} started"), 0)


class DrainGraceTest(AgqTestCase):
    def test_a_job_past_the_drain_grace_is_stopped_and_reported_as_a_retryable_failure(self):
        queue, job_id, worker_id = self.name("grace"), self.name("job"), self.name("worker")
        worker = self.start_process("slow", worker_id, self.key("worker", worker_id), queue)
        producer = self.producer()
        producer.submit("slow", {"seconds": 120}, job_id=job_id, queue=queue, max_attempts=3)
        worker.wait_log(f"slow job {job_id} started", 20)

        worker.proc.terminate()
        worker.wait_log("draining", 5)
        worker.proc.terminate()  # a second SIGTERM: no grace
        self.assertEqual(worker.wait_exit(20), 0)

        job = eventually(lambda: (lambda j: j if j["status"] in ("retrying", "queued") else None)(self.job(job_id)),
                         10, "the job back in its queue")
        self.assertEqual(len(job["errors"]), 1, json.dumps(job))
        self.assertIn("worker shutting down", job["errors"][0]["error"])
