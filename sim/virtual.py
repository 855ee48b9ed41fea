"""The simulated server on a virtual clock: the same engines and router as ``rampwatch sim``,
stepped by a discrete-event loop with no HTTP and no sleeping.

A run's figures depend only on the configuration and the workload, never on how busy the
host is (the live server ties its clock to wall time, so a starved host looks like a slow
GPU). Used by the calibration (``sim/calibration.py``) and its test.

::

    cluster = VirtualCluster(SimConfig(hardware="h100", model="llama-3.1-8b"))
    cluster.submit(Submission(prompt_ids, max_tokens=128), at=0.0)
    cluster.run(until=60.0)
    cluster.completed  # SimRequest objects with their timestamps filled in

A workload reacts to completions through ``on_finish(request, now)``: a closed-loop user
submits its next request there, at the simulated time its previous one finished.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from rampwatch.sim.config import SimConfig
from rampwatch.sim.engine import Engine, SimRequest
from rampwatch.sim.router import Router


@dataclass(slots=True)
class Submission:
    """A request to send: prompt token ids, output length, and who sent it."""

    prompt_token_ids: list[int]
    max_tokens: int
    user: int = 0


@dataclass(slots=True)
class StepSample:
    """One engine step, as the calibration reads it (vLLM's log line figures)."""

    end: float
    engine: int
    generated: int  # tokens emitted
    prompt_tokens: int  # prompt tokens of requests that got their first token (cached included)
    num_running: int
    num_waiting: int
    kv_usage: float


class VirtualCluster:
    """``engines`` data-parallel engines behind one router, each stepping on its own clock."""

    def __init__(
        self,
        config: SimConfig,
        on_finish: Callable[[SimRequest, Submission, float], None] | None = None,
        keep_samples: bool = True,
    ) -> None:
        self.config = config.resolved()
        self.engines = [Engine(self.config, i) for i in range(self.config.engines)]
        self.router = Router(self.engines, self.config.routing)
        self.on_finish = on_finish
        self.keep_samples = keep_samples
        self.now = 0.0
        self.completed: list[tuple[SimRequest, Submission]] = []
        self.samples: list[StepSample] = []
        self._arrivals: list[tuple[float, int, Submission]] = []
        self._seq = itertools.count()
        self._free_at = [0.0] * len(self.engines)  # when each engine's current step ends
        self._submissions: dict[str, Submission] = {}

    def submit(self, submission: Submission, at: float) -> None:
        """Queue ``submission`` to arrive at simulated time ``at``."""
        heapq.heappush(self._arrivals, (at, next(self._seq), submission))

    def _arrive(self, at: float, submission: Submission) -> None:
        index = self.router.pick()
        request_id = f"v{next(self._seq)}"
        req = SimRequest(request_id, submission.prompt_token_ids, submission.max_tokens)
        self._submissions[request_id] = submission
        self.engines[index].add_request(req, at)
        if self._free_at[index] < at:
            self._free_at[index] = at  # an idle engine starts stepping on arrival

    def _next_engine(self) -> int | None:
        best, best_t = None, 0.0
        for i, engine in enumerate(self.engines):
            if engine.has_work() and (best is None or self._free_at[i] < best_t):
                best, best_t = i, self._free_at[i]
        return best

    def run(self, until: float) -> None:
        """Process arrivals and steps in time order until simulated time ``until`` (or until
        nothing is left to do)."""
        arrivals, free_at = self._arrivals, self._free_at
        while True:
            index = self._next_engine()
            step_at = free_at[index] if index is not None else None
            if arrivals and (step_at is None or arrivals[0][0] <= step_at):
                at, _seq, submission = heapq.heappop(arrivals)
                if at > until:
                    heapq.heappush(arrivals, (at, _seq, submission))
                    self.now = until
                    return
                self.now = at
                self._arrive(at, submission)
                continue
            if index is None or step_at is None or step_at > until:
                self.now = until
                return
            self._step(index, step_at)

    def _step(self, index: int, at: float) -> None:
        engine = self.engines[index]
        result = engine.step(at)
        end = at + result.duration
        if result.num_scheduled_tokens == 0:
            # Nothing fits: only an arrival can change this engine's state (engines share
            # nothing), so it waits for the next one.
            if not self._arrivals:
                raise RuntimeError("virtual engine cannot make progress and no arrival is pending")
            self._free_at[index] = max(at, self._arrivals[0][0])
            return
        self._free_at[index] = end
        self.now = at
        if self.keep_samples:
            prompt_tokens = sum(
                r.num_prompt_tokens for r in result.emitted if r.first_token_at == end and len(r.output_token_ids) == 1
            )
            self.samples.append(
                StepSample(
                    end,
                    index,
                    len(result.emitted),
                    prompt_tokens,
                    engine.num_running,
                    engine.num_waiting,
                    engine.kv_usage(),
                )
            )
        for req in result.finished:
            submission = self._submissions.pop(req.request_id)
            self.completed.append((req, submission))
            if self.on_finish is not None:
                self.on_finish(req, submission, end)
