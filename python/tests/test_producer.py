"""The producer: graphs, waiting, following."""
import agq
from tests.support import ADDR, AgqTestCase


class ProducerTest(AgqTestCase):
    def start(self, queue: str) -> None:
        worker_id = self.name("worker")
        worker = agq.Worker(worker_id, self.key("worker", worker_id), addr=ADDR, queues=[queue], concurrency=2)

        @worker.handler("count-words")
        def count(job: agq.Job) -> int:
            return len(job.payload.split())

        @worker.handler("sum")
        def total(job: agq.Job) -> dict:
            parents = job.parents or {}
            return {"words": sum(p["result"]["output"] for p in parents.values()), "parents": sorted(parents)}

        self.start_worker(worker)

    def test_a_graph_submitted_in_one_call_runs_its_last_job_after_the_others(self):
        queue = self.name("graph")
        a, b, c = self.name("a"), self.name("b"), self.name("c")
        producer = self.producer()
        ids = producer.submit_many([
            {"job_id": a, "type": "count-words", "payload": "the quick brown fox", "queue": queue},
            {"job_id": b, "type": "count-words", "payload": "jumps over", "queue": queue},
            {"job_id": c, "type": "sum", "queue": queue, "after": [a, b]},
        ])
        self.assertEqual(ids, [a, b, c])
        self.assertEqual(producer.get(c).status, "pending")

        self.start(queue)
        done = producer.wait(c, timeout=30)
        self.assertEqual(done.status, "completed", done.raw)
        self.assertEqual(done.output, {"words": 6, "parents": sorted([a, b])})
        self.assertEqual(sorted(done.after), sorted([a, b]))

    def test_submitting_the_same_job_id_again_is_the_same_job(self):
        producer = self.producer()
        job_id = self.name("once")
        queue = self.name("idem")
        self.assertEqual(producer.submit("count-words", "one", job_id=job_id, queue=queue), job_id)
        self.assertEqual(producer.submit("count-words", "one", job_id=job_id, queue=queue), job_id)
        self.assertEqual(self.admin.execute_command("LLEN", f"queue:{queue}"), 1)

    def test_fair_keys_share_a_queue_in_proportion_to_their_weights(self):
        queue = self.name("fair")
        producer = self.producer()
        producer.submit_many([{"type": "count-words", "payload": "a b", "queue": queue, "fair_key": "big"}] * 6)
        small = producer.submit("count-words", "c", queue=queue, fair_key="small", fair_weight=2)
        info = producer.get(small)
        self.assertEqual((info.fair_key, info.fair_weight), ("small", 2))
        # small starts level with big's first job and moves half as far:
        # it is the second job a worker takes, not the seventh.
        waiting = self.admin.execute_command("LRANGE", f"queue:{queue}", 0, -1)
        self.assertIn(small, waiting[-2])

    def test_follow_yields_each_transition_until_the_job_ends(self):
        queue = self.name("follow")
        producer = self.producer()
        job_id = producer.submit("count-words", "to be or not to be", queue=queue)
        events = producer.follow(job_id, timeout=30)  # subscribed when it returns
        self.start(queue)
        seen = list(events)
        self.assertEqual(seen[-1].event, "completed")
        self.assertTrue(seen[-1].finished)
        self.assertIn("started", [e.event for e in seen])
        self.assertTrue(all(e.job_id == job_id for e in seen))
        # A job that has ended gives one event, its status.
        again = list(producer.follow(job_id, timeout=5))
        self.assertEqual([(e.event, e.status) for e in again], [("completed", "completed")])

    def test_wait_gives_up_after_its_timeout(self):
        producer = self.producer()
        job_id = producer.submit("count-words", "nobody serves this queue", queue=self.name("idle"))
        with self.assertRaises(agq.NotFinished):
            producer.wait(job_id, timeout=0.2)
        producer.cancel(job_id)
        self.assertEqual(producer.wait(job_id, timeout=5).status, "cancelled")
