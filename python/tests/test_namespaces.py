"""Namespaces: a cluster admin's producer in a namespace, a worker whose
key belongs to it."""
import agq
from tests.support import ADDR, ADMIN_KEY, AgqTestCase


class NamespaceTest(AgqTestCase):
    def test_a_producer_and_a_worker_in_a_namespace(self):
        ns = self.name("team")
        self.admin.execute_command("NAMESPACE.CREATE", ns)
        worker_id = self.name("worker")
        key = self.admin.execute_command("KEY.CREATE", "worker", worker_id, "NAMESPACE", ns)
        worker = agq.Worker(worker_id, key, addr=ADDR, queues=["ready"], concurrency=1)

        @worker.handler("double")
        def double(job: agq.Job) -> int:
            return job.payload * 2

        self.start_worker(worker)
        with agq.Producer(ADMIN_KEY, addr=ADDR, namespace=ns) as producer:
            job_id = producer.submit("double", 21)
            done = producer.wait(job_id, timeout=30)
        self.assertEqual(done.status, "completed", done.raw)
        self.assertEqual(done.output, 42)
        self.assertEqual(done.namespace, ns)
        # The default namespace does not know it.
        with self.assertRaises(agq.NotFound):
            self.producer().get(job_id)

    def test_a_key_of_one_namespace_may_not_name_another(self):
        ns = self.name("own")
        self.admin.execute_command("NAMESPACE.CREATE", ns)
        principal = self.name("producer")
        key = self.admin.execute_command("KEY.CREATE", "producer", principal, "NAMESPACE", ns)
        with self.assertRaises(agq.ReplyError) as caught:
            agq.Producer(key, addr=ADDR, principal=principal, namespace="default").get("x")
        self.assertIn(f"this key belongs to namespace {ns}", str(caught.exception))
