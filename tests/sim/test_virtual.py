"""The virtual-clock driver: same engine, discrete events, no wall clock."""

import time

import pytest

from rampwatch.sim.config import SimConfig
from rampwatch.sim.engine import Engine, SimRequest
from rampwatch.sim.virtual import Submission, VirtualCluster


def prompt(n: int, salt: int = 0) -> list[int]:
    return [(salt * 7919 + i) % 30000 + 10 for i in range(n)]


def config(**kwargs) -> SimConfig:
    base = dict(hardware="h100", model="llama-3.1-8b", seed=1)
    base.update(kwargs)
    return SimConfig(**base)


def test_matches_a_hand_driven_engine_loop():
    reqs = [(prompt(300 + 50 * i, i), 40 + i) for i in range(6)]
    cluster = VirtualCluster(config())
    for p, n in reqs:
        cluster.submit(Submission(p, n), at=0.0)
    cluster.run(until=1e9)

    engine = Engine(config().resolved())
    for i, (p, n) in enumerate(reqs):
        engine.add_request(SimRequest(f"r{i}", p, n), now=0.0)
    t, finish_times = 0.0, []
    while engine.has_work():
        result = engine.step(t)
        t += result.duration
        finish_times += [r.finished_at for r in result.finished]
    assert sorted(r.finished_at for r, _ in cluster.completed) == sorted(finish_times)


def test_arrivals_join_at_their_time_and_an_idle_engine_waits_for_them():
    cluster = VirtualCluster(config())
    cluster.submit(Submission(prompt(100), 10), at=5.0)
    cluster.run(until=4.0)
    assert cluster.now == 4.0 and not cluster.completed and cluster.engines[0].num_waiting == 0
    cluster.run(until=100.0)
    ((req, _),) = cluster.completed
    assert req.arrival == 5.0 and req.first_scheduled_at == 5.0 and req.finished_at > 5.0


def test_closed_loop_user_sends_its_next_request_when_the_last_finishes():
    sent = []

    def on_finish(req, sub, now):
        sent.append(now)
        if len(sent) < 5:
            cluster.submit(Submission(prompt(50, len(sent)), 20, user=sub.user), at=now)

    cluster = VirtualCluster(config(), on_finish=on_finish)
    cluster.submit(Submission(prompt(50), 20), at=0.0)
    cluster.run(until=1e6)
    starts = sorted(r.arrival for r, _ in cluster.completed)
    assert len(starts) == 5
    assert starts[1:] == pytest.approx(sent[:4])  # each arrival is the previous finish


def test_never_reads_or_waits_on_the_wall_clock(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("the virtual clock touched wall time")

    for name in ("monotonic", "time", "perf_counter", "sleep"):
        monkeypatch.setattr(time, name, forbidden)

    def run() -> list[tuple[float, float]]:
        cluster = VirtualCluster(config())
        for i in range(16):
            cluster.submit(Submission(prompt(500, i), 300), at=i * 0.01)
        cluster.run(until=1e6)
        return sorted((r.first_token_at, r.finished_at) for r, _ in cluster.completed)

    first = run()
    assert len(first) == 16 and first[-1][1] > 1.0  # seconds of simulated decode
    assert run() == first  # a function of the configuration and the workload only


def test_data_parallel_engines_step_independently():
    cluster = VirtualCluster(config(engines=2))
    for i in range(8):
        cluster.submit(Submission(prompt(200, i), 50), at=0.0)
    cluster.run(until=1e6)
    per_engine = [e.stats.finished["length"] for e in cluster.engines]
    assert per_engine == [4, 4]  # least-loaded routing alternates
    # two engines with half the load each finish sooner than one with all of it
    single = VirtualCluster(config())
    for i in range(8):
        single.submit(Submission(prompt(200, i), 50), at=0.0)
    single.run(until=1e6)
    assert max(r.finished_at for r, _ in cluster.completed) < max(r.finished_at for r, _ in single.completed)


def test_samples_follow_vllm_log_line_counting():
    cluster = VirtualCluster(config())
    cluster.submit(Submission(prompt(300), 7), at=0.0)
    cluster.run(until=1e6)
    assert sum(s.generated for s in cluster.samples) == 7
    assert sum(s.prompt_tokens for s in cluster.samples) == 300  # counted once, at the first token
