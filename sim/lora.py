"""LoRA adapters in the simulator: vLLM's ``--enable-lora --max-loras N --max-lora-rank R
--max-cpu-loras M --lora-modules NAME=PATH …``.

Semantics follow vLLM v1 (``vllm/v1/core/sched/scheduler.py``, ``vllm/lora/``):

- Each ``--lora-modules`` adapter is served under its own name: ``/v1/models`` lists it
  (``root``: its path, ``parent``: the base model), and a request whose ``model`` is its
  name runs on it. Any other name is vLLM's 404 ``The model `x` does not exist.``
- A batch holds at most ``max_loras`` distinct adapters (the GPU slots). The scheduler
  admits a waiting request whose adapter is neither running nor has a free slot by
  skipping it: it stays at the head of the queue and the requests behind it may go
  (vLLM's ``skipped_waiting_requests``); requests of the base model never count.
- An adapter taken into a slot it did not hold is loaded there: from CPU memory when it
  is among the ``max_cpu_loras`` most recently used (vLLM's LRU cache, default
  ``max_loras``), else from disk first. The load's time is added to that step
  (``LoraCosts``), growing with the rank.
- A step with LoRA requests in it costs ``rank_cost_per_rank × rank`` more (the extra
  low-rank matmuls), a little.
- ``/metrics`` exports ``vllm:lora_requests_info`` as vLLM does: one gauge whose labels are
  ``max_lora`` and the running and waiting adapters (names joined by commas), value the
  time the state was set; each state seen stays on the page as its own series
  (``LoraInfo``), as prometheus_client keeps every label set it was given.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rampwatch.core.errors import UserError

# vLLM 0.32's allowed --max-lora-rank values (vllm/config/lora.py, MaxLoRARanks).
MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# The label sets of vllm:lora_requests_info kept on the page (vLLM keeps every one; the
# simulator the newest this many, so a long run's page stays bounded).
MAX_INFO_SERIES = 64


@dataclass(frozen=True, slots=True)
class LoraModule:
    name: str
    path: str
    base_model_name: str | None = None


@dataclass(frozen=True, slots=True)
class LoraConfig:
    """The LoRA flags. ``load_from_disk_s`` / ``load_from_cpu_s`` are the times to bring a
    rank-16 adapter into a slot (scaled by rank / 16); ``rank_cost_per_rank`` the share
    of a step's time each rank adds when a LoRA request is in it."""

    enable_lora: bool = False
    modules: tuple[LoraModule, ...] = ()
    max_loras: int = 1
    max_lora_rank: int = 16
    max_cpu_loras: int | None = None
    load_from_disk_s: float = 0.030
    load_from_cpu_s: float = 0.002
    rank_cost_per_rank: float = 0.0005

    @property
    def cpu_slots(self) -> int:
        return self.max_cpu_loras if self.max_cpu_loras is not None else self.max_loras

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.modules)

    def validate(self) -> None:
        if self.modules and not self.enable_lora:
            raise UserError("--lora-modules needs --enable-lora")
        if self.max_loras < 1:
            raise UserError(f"--max-loras {self.max_loras}: must be >= 1")
        if self.max_lora_rank not in MAX_LORA_RANKS:
            raise UserError(
                f"--max-lora-rank {self.max_lora_rank}: valid values: {', '.join(map(str, MAX_LORA_RANKS))}"
            )
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise UserError(f"--max-cpu-loras {self.max_cpu_loras}: must be >= --max-loras {self.max_loras}")
        names = self.names
        if len(set(names)) != len(names):
            raise UserError("--lora-modules: an adapter name is given twice")

    def load_s(self, from_disk: bool) -> float:
        return (self.load_from_disk_s if from_disk else self.load_from_cpu_s) * self.max_lora_rank / 16


def parse_lora_modules(values: Sequence[str] | None) -> tuple[LoraModule, ...]:
    """``--lora-modules`` as vLLM reads it: ``name=path`` items, or JSON objects
    ``{"name", "path", "base_model_name"}``; raises ``UserError`` naming the item."""
    out = []
    for item in values or []:
        if not item:
            continue
        if "=" in item and "," not in item:
            name, path = item.split("=", 1)
            out.append(LoraModule(name, path))
            continue
        try:
            data = json.loads(item)
            out.append(
                LoraModule(str(data["name"]), str(data["path"]), data.get("base_model_name"))
                if isinstance(data, dict)
                else _bad(item)
            )
        except (json.JSONDecodeError, KeyError):
            _bad(item)
    for module in out:
        if not module.name or not module.name.isprintable():
            raise UserError(f"--lora-modules: {module.name!r} is not a usable adapter name")
    return tuple(out)


def _bad(item: str) -> LoraModule:
    raise UserError(f"--lora-modules {item!r}: expected NAME=PATH or a JSON object with name and path")


def lora_argv(config: LoraConfig) -> list[str]:
    """The ``rampwatch sim`` (and ``vllm serve``) flags that give ``config``."""
    if not config.enable_lora:
        return []
    argv = ["--enable-lora", "--max-loras", str(config.max_loras), "--max-lora-rank", str(config.max_lora_rank)]
    if config.max_cpu_loras is not None:
        argv += ["--max-cpu-loras", str(config.max_cpu_loras)]
    if config.modules:
        argv += ["--lora-modules", *(f"{m.name}={m.path}" for m in config.modules)]
    return argv


class LoraSlots:
    """One engine's adapter slots: which adapters are in its GPU slots and CPU cache (LRU),
    what a step may admit, and the load time a step pays."""

    def __init__(self, config: LoraConfig) -> None:
        self.config = config
        self.gpu: OrderedDict[str, None] = OrderedDict()  # least recently used first
        self.cpu: OrderedDict[str, None] = OrderedDict()
        self._step: set[str] = set()
        self._load_s = 0.0
        self.loads_from_disk = 0
        self.loads_from_cpu = 0

    def begin_step(self, running: Iterable[str | None]) -> None:
        """The adapters the running requests hold (they are in the batch already)."""
        self._step = {name for name in running if name is not None}
        self._load_s = 0.0

    def admits(self, adapter: str | None) -> bool:
        """Whether a waiting request for ``adapter`` fits this step's batch: the base
        model always, an adapter already in the batch, or a new one while a slot is free."""
        if adapter is None or adapter in self._step:
            return True
        return len(self._step) < self.config.max_loras

    def take(self, adapter: str | None) -> None:
        """A request for ``adapter`` admitted: its adapter joins the batch, loaded into a
        slot first when it was not in one (the least recently used idle slot given up)."""
        if adapter is None:
            return
        self._step.add(adapter)
        if adapter in self.gpu:
            self.gpu.move_to_end(adapter)
            return
        from_disk = adapter not in self.cpu
        self._load_s += self.config.load_s(from_disk)
        if from_disk:
            self.loads_from_disk += 1
        else:
            self.loads_from_cpu += 1
        self.cpu[adapter] = None
        self.cpu.move_to_end(adapter)
        while len(self.cpu) > self.config.cpu_slots:
            self.cpu.popitem(last=False)
        self.gpu[adapter] = None
        while len(self.gpu) > self.config.max_loras:
            idle = next((name for name in self.gpu if name not in self._step), None)
            if idle is None:
                break
            del self.gpu[idle]

    def step_time(self, base_s: float, any_lora: bool) -> float:
        """What this step's LoRA work adds to a step of ``base_s`` seconds: the loads, and
        the low-rank matmuls when a LoRA request is in the batch."""
        extra = self._load_s
        if any_lora and base_s > 0:
            extra += base_s * self.config.rank_cost_per_rank * self.config.max_lora_rank
        return extra


def adapters_of(requests: Iterable[object]) -> list[str]:
    """The distinct adapters of requests (their ``lora``), in first-seen order."""
    seen: dict[str, None] = {}
    for req in requests:
        name = getattr(req, "lora", None)
        if name is not None:
            seen[name] = None
    return list(seen)


class LoraInfo:
    """``vllm:lora_requests_info``'s series: every label set the state has been in, each at
    the time it was last set (the newest ``MAX_INFO_SERIES``)."""

    def __init__(self, max_loras: int) -> None:
        self.max_loras = max_loras
        self.series: OrderedDict[tuple[str, str], float] = OrderedDict()  # (running, waiting) -> time

    def update(self, running: Sequence[str], waiting: Sequence[str], now_unix: float) -> None:
        key = (",".join(running), ",".join(waiting))
        self.series[key] = now_unix
        self.series.move_to_end(key)
        while len(self.series) > MAX_INFO_SERIES:
            self.series.popitem(last=False)

    def samples(self) -> list[tuple[dict[str, str], float]]:
        return [
            ({"max_lora": str(self.max_loras), "running_lora_adapters": r, "waiting_lora_adapters": w}, t)
            for (r, w), t in self.series.items()
        ]


def lora_model_cards(config: LoraConfig, base_model: str, created: int) -> list[dict[str, object]]:
    """``/v1/models``'s cards of the adapters, as vLLM lists them (``root``: the adapter's
    path, ``parent``: its base model)."""
    return [
        {
            "id": m.name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": m.path,
            "parent": m.base_model_name or base_model,
            "max_model_len": None,
            "permission": [],
        }
        for m in config.modules
    ]
