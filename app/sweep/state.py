"""The sweep's state, ``OUTPUT_DIR/sweep.json``: its rows built from the spec, written whole
(atomically), read back, and continued by ``--resume``. It is the table the end prints,
what ``--resume`` continues from, and what the live screen draws."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from rampwatch.app.sweep.serve_args import apply_args, config_label, config_slug, gpu_count, shown_command
from rampwatch.app.sweep.spec import SweepSpec
from rampwatch.core import strict_json
from rampwatch.core.errors import UserError
from rampwatch.core.figures.search_best import SEARCH_BEST_RULE
from rampwatch.core.figures.sweep import BEST_RULE
from rampwatch.core.files import private_file
from rampwatch.sim.serve_flags import is_sim_command, vllm_serve_argv

SWEEP_STATE = "sweep.json"


def write_state(path: Path, state: dict[str, Any]) -> None:
    """``sweep.json`` replaced whole (a reader never sees half a file)."""
    tmp = path.with_suffix(".json.tmp")
    with private_file(tmp, "w", encoding="utf-8") as fh:
        fh.write(strict_json.dumps(state, indent=1) + "\n")
    os.replace(tmp, path)


def read_state(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("rows"), list) else None


def new_state(spec: SweepSpec, base_argv: list[str]) -> dict[str, Any]:
    rows = []
    for i, args in enumerate(spec.configs):
        argv = apply_args(base_argv, args)
        rows.append(
            {
                "index": i,
                "args": args,
                "config": config_label(args),
                "command": shown_command(argv),
                # a simulator sweep also prints what to run on the real server
                "vllm_command": shown_command(vllm_serve_argv(argv, spec.vllm_model)) if is_sim_command(argv) else None,
                "gpus": gpu_count(argv),
                "slug": config_slug(i, args),
                "status": "pending",
            }
        )
    state: dict[str, Any] = {
        "sweep": spec.name,
        "file": spec.path,
        "scenario": spec.scenario,
        "serve": shown_command(base_argv),
        "slo": spec.slo.text,
        "schedule": spec.schedule,
        "repeats": spec.repeats,
        "best_rule": BEST_RULE,
        "started_at": time.time(),
        "finished": False,
        "current": None,
        "current_line": None,
        "best": None,
        "rows": rows,
    }
    if spec.search is not None:  # load: search: judged by the confirmed max (search_best)
        state.update(search=spec.search.options(), best_rule=SEARCH_BEST_RULE)
    return state


def resume_state(old: dict[str, Any], fresh: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """The fresh state with the completed rows of ``old`` kept: a row is kept when it is
    ``done`` and its recording is there; any other (pending, half-done, interrupted or
    failed) runs again, its partial recording removed. The matrix must be the same."""
    if [r.get("args") for r in old["rows"]] != [r["args"] for r in fresh["rows"]]:
        raise UserError(
            f"--resume: {out_dir / SWEEP_STATE} is a sweep of other configurations; "
            "give another --output-dir or the same matrix"
        )
    if old.get("repeats", 1) != fresh["repeats"]:
        raise UserError(
            f"--resume: {out_dir / SWEEP_STATE} is a sweep of {old.get('repeats', 1)} run(s) a configuration; "
            "give the same repeats or another --output-dir"
        )
    for i, row in enumerate(old["rows"]):
        recordings = row.get("recordings") or [row.get("recording")]
        if row.get("status") == "done" and all(r and (out_dir / str(r)).is_file() for r in recordings):
            fresh["rows"][i] = row
        else:
            slug = fresh["rows"][i]["slug"]
            repeats = [None] if fresh["repeats"] == 1 else list(range(fresh["repeats"]))
            for repeat in repeats:
                for suffix in (".rwrec", ".rwrec.server.log"):
                    (out_dir / f"{run_slug(slug, repeat)}{suffix}").unlink(missing_ok=True)
    fresh["started_at"] = old.get("started_at", fresh["started_at"])
    return fresh


def check_output_dir(out_dir: Path, resume: bool) -> None:
    """A new sweep needs an output dir without one; ``--resume`` needs one to continue."""
    state = out_dir / SWEEP_STATE
    if resume and read_state(state) is None:
        raise UserError(f"--resume: no sweep to resume in {out_dir} (no readable {SWEEP_STATE})")
    if not resume and state.exists():
        raise UserError(
            f"--output-dir {out_dir}: holds a sweep already ({SWEEP_STATE}); "
            "pass --resume to continue it or another --output-dir"
        )


def run_slug(slug: str, repeat: int | None) -> str:
    """A run's recording name: the configuration's, and its repeat's number when it runs
    more than once."""
    return slug if repeat is None else f"{slug}-r{repeat + 1}"
