"""Everything that sends the load and talks to the server: the workload, the transport, the
server's side and the run (its subpackages), and the sweep. The figures are `core.figures`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rampwatch.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from rampwatch.loadgen.sweep import (
        BEST_RULE,
        MAX_REPEATS,
        NOT_REACHED,
        TABLE_LEGEND,
        EarlyStopRule,
        apply_args,
        choose_best,
        combine_runs,
        command_line,
        config_label,
        config_row,
        config_slug,
        format_pareto,
        format_table,
        gpu_count,
        is_sim_command,
        knee_text,
        limit_reached,
        load_sweep,
        mark_pareto,
        shown_command,
        table_cells,
        verdict_text,
        vllm_serve_argv,
    )

# module -> the public names it defines, loaded on first use
_MODULES: dict[str, tuple[str, ...]] = {
    "sweep": (
        "BEST_RULE",
        "EarlyStopRule",
        "MAX_REPEATS",
        "NOT_REACHED",
        "TABLE_LEGEND",
        "apply_args",
        "choose_best",
        "combine_runs",
        "command_line",
        "config_label",
        "config_row",
        "config_slug",
        "format_pareto",
        "format_table",
        "gpu_count",
        "is_sim_command",
        "knee_text",
        "limit_reached",
        "load_sweep",
        "mark_pareto",
        "shown_command",
        "table_cells",
        "verdict_text",
        "vllm_serve_argv",
    ),
}
__all__ = [
    "BEST_RULE",
    "EarlyStopRule",
    "MAX_REPEATS",
    "NOT_REACHED",
    "TABLE_LEGEND",
    "apply_args",
    "choose_best",
    "combine_runs",
    "command_line",
    "config_label",
    "config_row",
    "config_slug",
    "format_pareto",
    "format_table",
    "gpu_count",
    "is_sim_command",
    "knee_text",
    "limit_reached",
    "load_sweep",
    "mark_pareto",
    "shown_command",
    "table_cells",
    "verdict_text",
    "vllm_serve_argv",
]
__getattr__ = lazy_attributes(__name__, _MODULES)
