"""The chat Deployment's parts that need no running chain: the gateway's queue and whom it hands requests to, its
/metrics, the requests' script, the engines' inbox and Prometheus's job for them."""

from demo.arrival_script import ArrivalScript
from demo.chat import scrape_job
from demo.engine_replica import Inbox
from demo.gateway import QUEUE_SIZE, Gateway, GatewayMetrics
from loadgen.serving.arrivals import Arrivals, TokenRange
from loadgen.serving.request import Request


def requests(*ids: int) -> list[Request]:
    return [Request(i, 0.0, prompt=256, output=128) for i in ids]


def handed(pairs: list[tuple[str, Request]]) -> list[tuple[str, int]]:
    return [(replica, request.id) for replica, request in pairs]


def test_requests_wait_in_the_gateway_while_no_replica_is_ready() -> None:
    gateway = Gateway()
    gateway.arrive(requests(0, 1, 2))
    assert gateway.hand_out({}) == []
    assert gateway.waiting == 3


def test_each_request_goes_to_the_replica_that_holds_the_fewest() -> None:
    gateway = Gateway()
    gateway.arrive(requests(0, 1, 2, 3, 4, 5))
    # chat-0 holds 3, chat-1 1, chat-2 none: 2 fill chat-2 up to chat-1's 1, then chat-1 and chat-2 take turns (ties to
    # the one named first) up to chat-0's 3, and the last goes to chat-0
    assert handed(gateway.hand_out({"chat-0": 3, "chat-1": 1, "chat-2": 0})) == [
        ("chat-2", 0), ("chat-1", 1), ("chat-2", 2), ("chat-1", 3), ("chat-2", 4), ("chat-0", 5),
    ]  # fmt: skip
    assert gateway.waiting == 0


def test_a_replica_that_goes_gives_back_its_requests_ahead_of_the_others() -> None:
    gateway = Gateway()
    gateway.arrive(requests(7, 8))
    gateway.give_back(requests(3, 5))
    assert handed(gateway.hand_out({"chat-0": 0})) == [("chat-0", 3), ("chat-0", 5), ("chat-0", 7), ("chat-0", 8)]


def test_the_gateways_page_has_the_endpoint_pickers_queue_gauge() -> None:
    gateway = Gateway()
    metrics = GatewayMetrics(gateway, "chat", "chat-model")
    labels = {"fairness_id": "default", "inference_pool": "chat", "model_name": "chat-model", "priority": "0",
              "target_model_name": "chat-model"}  # fmt: skip
    assert metrics.registry.get_sample_value(QUEUE_SIZE, labels) == 0
    gateway.arrive(requests(0, 1))
    assert metrics.registry.get_sample_value(QUEUE_SIZE, labels) == 2  # read at every scrape


def test_the_requests_script_and_its_stretch() -> None:
    script = ArrivalScript(((0, 0.0), (20, 5.0), (45, 0.0)))
    assert [script.rate(t) for t in (0, 19.9, 20, 44.9, 45, 75)] == [0, 0, 5, 5, 0, 0]
    assert script.stretched(2).rate(89) == 5
    assert script.stretched(2).rate(90) == 0
    assert script.describe() == "none from 0 s, 5 a second from 20 s, none from 45 s"


def test_requests_arrive_only_while_the_script_has_a_rate() -> None:
    script = ArrivalScript(((0, 0.0), (20, 5.0), (45, 0.0)))
    arrivals = Arrivals(script.schedule(), TokenRange(256, 256), TokenRange(128, 128))
    times = [r.arrival for r in arrivals.due(1000)]
    assert times
    assert all(20 <= t < 45 for t in times)
    assert arrivals.next_time() is None


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def test_the_engine_takes_requests_stamped_with_when_they_were_handed_over() -> None:
    clock = Clock(100.0)
    inbox = Inbox(clock)
    assert inbox.next_time() is None  # nothing to take: the engine naps
    a, b = requests(0, 1)
    inbox.put(a)
    clock.t = 100.5
    inbox.put(b)
    assert inbox.next_time() == 0  # already due
    clock.t = 101.0  # the engine looks at 3 s on its own clock, which started at 98 on this one
    assert inbox.due(3.0) == [a, b]
    assert (a.arrival, b.arrival) == (2.0, 2.5)
    assert inbox.due(3.5) == []
    assert inbox.unfinished() == [a, b]
    a.generated = a.output  # a has all its tokens
    assert inbox.unfinished() == [b]


def test_the_engines_are_scraped_with_the_labels_of_the_shipped_job() -> None:
    job = scrape_job({"127.0.0.1:9001": ("llm", "chat-0", "demo-node")})
    assert job["job_name"] == "gpuscale-inference-engines"
    assert job["static_configs"] == [
        {"targets": ["127.0.0.1:9001"], "labels": {"namespace": "llm", "pod": "chat-0", "node": "demo-node"}}
    ]
    assert "metric_relabel_configs" not in job  # the names as the engines' library writes them, as in a cluster
