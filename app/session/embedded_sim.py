"""What the embedded simulator (`rampwatch run` without ``--target`` and ``--serve``) is
started with for a scenario: the run's ``--sim-hardware`` and ``--sim-model``, plus what
the scenario's requests need of the server, so that a shipped scenario shows its
feature without a flag:

- LoRA adapters (``workload.adapters``): served under their names with vLLM's defaults
  (``--max-loras 1``: fewer slots than adapters is what the knee's LoRA rule explains);
- reasoning fields (``reasoning_effort``, ``chat_template_kwargs``): vLLM's
  ``--reasoning-parser`` (``deepseek_r1``: the default model preset is a Llama-3.1-8B,
  as DeepSeek-R1-Distill-Llama-8B is), so the answers think first;
- images (``workload.images``): the image model preset (``qwen2-vl-7b``) when the run
  did not name ``--sim-model``, so the images are charged in prefill and the multimodal
  cache counts them; a ``--sim-model`` that takes none is refused before the run (each
  request would be a 400).

Each of these is one phrase of ``SimChoice.notes``, which the run prints before it starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rampwatch.app.run_config import DEFAULT_SIM_MODEL, RunConfig
from rampwatch.core.errors import UserError
from rampwatch.core.figures.classes import MIX_KEY
from rampwatch.loadgen.workload.adapters import adapter_names
from rampwatch.loadgen.workload.reasoning_spec import REASONING_KEYS
from rampwatch.sim.lora import LoraConfig, LoraModule
from rampwatch.sim.multimodal import IMAGE_MODELS
from rampwatch.sim.reasoning import ReasoningConfig

IMAGE_SIM_MODEL = IMAGE_MODELS[0]
REASONING_PARSER = "deepseek_r1"


@dataclass(frozen=True)
class SimChoice:
    """The scenario's part of the embedded simulator's configuration, and what it adds
    in words (empty for a scenario that needs nothing of it)."""

    model: str
    lora: LoraConfig
    reasoning: ReasoningConfig | None
    notes: tuple[str, ...] = ()


def _classes(workload: dict[str, Any]) -> list[dict[str, Any]]:
    mix = workload.get(MIX_KEY)
    return [c for c in mix if isinstance(c, dict)] if isinstance(mix, list) else [workload]


def wants_reasoning(workload: dict[str, Any]) -> bool:
    """The workload (or a class of its mixture) sets a field that only a reasoning model reads."""
    return any(c.get(key) is not None for c in _classes(workload) for key in REASONING_KEYS)


def sends_images(workload: dict[str, Any]) -> bool:
    return any(c.get("images") for c in _classes(workload))


def sim_choice(workload: dict[str, Any], sim_model: str | None) -> SimChoice:
    """The embedded simulator's model, adapters and reasoning for a checked workload;
    ``sim_model`` is ``--sim-model`` (None: not given)."""
    notes = []
    model = sim_model or DEFAULT_SIM_MODEL
    if sends_images(workload):
        if sim_model is None:
            model = IMAGE_SIM_MODEL
            notes.append(f"--model {IMAGE_SIM_MODEL} (the scenario sends images)")
        elif sim_model not in IMAGE_MODELS:  # every request would be a 400: say so before the run
            raise UserError(
                f"--sim-model {sim_model}: takes no images, and the scenario sends them (workload.images); "
                f"give --sim-model {IMAGE_SIM_MODEL}, or leave --sim-model out"
            )
    lora = LoraConfig()
    adapters = adapter_names(workload)
    if adapters:
        lora = LoraConfig(enable_lora=True, modules=tuple(LoraModule(name, f"sim://{name}") for name in adapters))
        notes.append(f"--enable-lora --max-loras {lora.max_loras} and its {len(adapters)} adapters")
    reasoning = None
    if wants_reasoning(workload):
        reasoning = ReasoningConfig(parser=REASONING_PARSER)
        notes.append(
            f"--reasoning-parser {REASONING_PARSER} --reasoning-tokens {reasoning.tokens} (the scenario sets reasoning fields)"
        )
    return SimChoice(model=model, lora=lora, reasoning=reasoning, notes=tuple(notes))


def embedded_sim_model(config: RunConfig, workload: dict[str, Any]) -> str:
    """``--sim-model`` as the run resolves it: the one given, else the embedded
    simulator's choice for the scenario (without one, the default: the header's
    options keep a model preset either way)."""
    if config.sim_model is not None:
        return config.sim_model
    return sim_choice(workload, None).model if config.embedded_sim else DEFAULT_SIM_MODEL


def notes_line(notes: tuple[str, ...]) -> str:
    """The one line the run prints (and records as an info event) on what the scenario
    added to the embedded simulator."""
    return f"embedded simulator: {'; '.join(notes)}"
