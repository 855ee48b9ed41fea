"""The ``workload:`` mapping of a scenario (and of each mixture class), and the ``slo:``
mapping: their keys and checks. ``check_workload`` returns the workload with its
defaults filled; problems go to a ``Problems`` at their key path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rampwatch.core.figures.adapters import ADAPTERS_KEY
from rampwatch.core.figures.classes import MIX_KEY
from rampwatch.loadgen.workload.adapters import check_adapters
from rampwatch.loadgen.workload.images import check_images
from rampwatch.loadgen.workload.mixture import CLASS_KEYS, check_mix
from rampwatch.loadgen.workload.reasoning_spec import REASONING_KEYS, check_reasoning
from rampwatch.loadgen.workload.spec_checks import (
    KeyPath,
    Problems,
    choice_check,
    describe,
    dotted,
    is_number,
    number_check,
)

PROMPT_FORMATS = ("text", "token_ids")
LENGTH_DISTS = ("fixed", "uniform", "normal", "lognormal")
THINK_DISTS = ("fixed", "uniform", "exponential", "lognormal")
SESSION_KEYS = ("turns", "think_time_s")
DOC_PICKS = ("uniform", "zipf")
DATASET_FORMATS = ("auto", "sharegpt", "prompts", "messages")
WORKLOAD_KEYS = (
    "prompt_format",
    "input_tokens",
    "output_tokens",
    "system_prompt",
    "documents",
    "conversations",
    "sessions",
    "dataset",
    "ignore_eos",
    "extra_body",
    "images",
    ADAPTERS_KEY,
    *REASONING_KEYS,
)
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms", "ttfa_ms")  # ttfa: a reasoning model's first answer token


def check_length(p: Problems, path: KeyPath, value: Any) -> dict[str, Any] | None:
    if is_number(value) and not isinstance(value, bool):
        if p.check(path, value, number_check(1, integer=True)):
            return {"dist": "fixed", "value": int(value)}
        return None
    if not p.mapping(path, value, f"a token count or {{dist: {'|'.join(LENGTH_DISTS)}, …}}"):
        return None
    dist = value.get("dist")
    if not p.check(path + ("dist",), dist, choice_check(LENGTH_DISTS)):
        return None
    fields = {
        "fixed": {"value": number_check(1, integer=True)},
        "uniform": {"min": number_check(1, integer=True), "max": number_check(1, integer=True)},
        "normal": {"mean": number_check(1), "std": number_check(0)},
        "lognormal": {"median": number_check(1), "sigma": number_check(0)},
    }[dist]
    optional = (
        {"min": number_check(1, integer=True), "max": number_check(1, integer=True)}
        if dist in ("normal", "lognormal")
        else {}
    )
    p.keys(path, value, ("dist", *fields, *optional))
    out: dict[str, Any] = {"dist": dist}
    ok = True
    for name, check in fields.items():
        if name not in value:
            p.add(path + (name,), "required key is missing", True)
            ok = False
        elif p.check(path + (name,), value[name], check):
            out[name] = value[name]
        else:
            ok = False
    for name, check in optional.items():
        if name in value and value[name] is not None:
            if p.check(path + (name,), value[name], check):
                out[name] = int(value[name])
            else:
                ok = False
    if ok and "min" in out and "max" in out and out["min"] > out["max"]:
        p.add(path + ("max",), f"expected a number >= min ({out['min']}), got {describe(value['max'])}")
        ok = False
    for key in ("value", "min", "max"):
        if key in out:
            out[key] = int(out[key])
    return out if ok else None


# Workload keys a trace schedule decides itself: the trace gives each request's prompt.
TRACE_DECIDES = (
    "input_tokens",
    "output_tokens",
    "system_prompt",
    "documents",
    "conversations",
    "sessions",
    "dataset",
    "images",
)


def check_workload(
    p: Problems,
    w: Any,
    endpoint: str,
    base_dir: Path,
    trace: bool = False,
    path: KeyPath = ("workload",),
    extra_keys: tuple[str, ...] = (),
) -> dict[str, Any]:
    if not p.mapping(path, w, "prompt_format, input_tokens, output_tokens, …"):
        return {}
    if MIX_KEY in w:
        if trace:
            p.add(
                path + (MIX_KEY,),
                "cannot be combined with schedule.kind trace (the trace gives each request's prompt and lengths)",
                True,
            )
            return {}
        return check_mix(
            p,
            w,
            path,
            lambda class_path, cw: check_workload(p, cw, endpoint, base_dir, path=class_path, extra_keys=CLASS_KEYS),
            lambda slo_path, value: check_slo(p, slo_path, value),
        )
    p.keys(path, w, WORKLOAD_KEYS + extra_keys)
    out: dict[str, Any] = {}
    fmt = w.get("prompt_format", "text")
    if p.check(path + ("prompt_format",), fmt, choice_check(PROMPT_FORMATS)):
        if fmt == "token_ids" and endpoint == "chat":
            p.add(
                path + ("prompt_format",),
                "expected text with endpoint chat (token id prompts need endpoint completions), got 'token_ids'",
            )
    out["prompt_format"] = fmt
    if trace:
        for clash in TRACE_DECIDES:
            if w.get(clash) is not None:
                p.add(
                    path + (clash,),
                    "cannot be combined with schedule.kind trace (the trace gives each request's prompt and lengths)",
                    True,
                )
        w = {k: v for k, v in w.items() if k not in TRACE_DECIDES}
    dataset = w.get("dataset")
    if dataset is not None and p.mapping(path + ("dataset",), dataset, "path, format"):
        p.keys(path + ("dataset",), dataset, ("path", "format"))
        ds_fmt = dataset.get("format", "auto")
        p.check(path + ("dataset", "format"), ds_fmt, choice_check(DATASET_FORMATS))
        ds_path = dataset.get("path")
        if not isinstance(ds_path, str) or not ds_path:
            p.add(path + ("dataset", "path"), f"expected a file path, got {describe(ds_path)}", "path" not in dataset)
        else:
            found = Path(ds_path).expanduser()
            if not found.is_absolute() and not found.exists():
                found = base_dir / found
            if not found.is_file():
                p.add(path + ("dataset", "path"), f"dataset file not found: {ds_path}")
            ds_path = str(found.resolve()) if found.is_file() else ds_path
        out["dataset"] = {"path": ds_path, "format": ds_fmt}
        for clash in ("documents", "conversations", "input_tokens"):
            if w.get(clash) is not None:
                p.add(
                    path + (clash,),
                    f"cannot be combined with {dotted(path + ('dataset',))} (prompts come from the dataset)",
                    True,
                )
        if fmt == "token_ids":
            p.add(path + ("prompt_format",), "expected text with a dataset, got 'token_ids'")
    for key in ("input_tokens", "output_tokens"):
        if w.get(key) is not None:
            out[key] = check_length(p, path + (key,), w[key])
        elif trace:
            continue
        elif key == "input_tokens" and dataset is None:
            p.add(path + (key,), "required key is missing", True)
        elif key == "output_tokens" and (
            dataset is None or (isinstance(dataset, dict) and dataset.get("format") in ("prompts", "messages"))
        ):
            hint = "" if dataset is None else " (only ShareGPT datasets carry answer lengths)"
            p.add(path + (key,), "required key is missing" + hint, True)
    system = w.get("system_prompt")
    if system is not None and p.mapping(path + ("system_prompt",), system, "tokens: N or text: '…'"):
        p.keys(path + ("system_prompt",), system, ("tokens", "text"))
        if ("tokens" in system) == ("text" in system):
            p.add(path + ("system_prompt",), "expected exactly one of tokens or text")
        elif "tokens" in system:
            if p.check(path + ("system_prompt", "tokens"), system["tokens"], number_check(1, integer=True)):
                out["system_prompt"] = {"tokens": int(system["tokens"])}
        elif isinstance(system["text"], str) and system["text"]:
            if fmt == "token_ids":
                p.add(path + ("system_prompt", "text"), "expected tokens: N with prompt_format token_ids, got text")
            out["system_prompt"] = {"text": system["text"]}
        else:
            p.add(path + ("system_prompt", "text"), f"expected non-empty text, got {describe(system['text'])}")
    docs = w.get("documents")
    if docs is not None and p.mapping(path + ("documents",), docs, "count, tokens, pick"):
        p.keys(path + ("documents",), docs, ("count", "tokens", "pick", "zipf_exponent"))
        d: dict[str, Any] = {"pick": docs.get("pick", "uniform"), "zipf_exponent": docs.get("zipf_exponent", 1.0)}
        for key in ("count", "tokens"):
            if key not in docs:
                p.add(path + ("documents", key), "required key is missing", True)
            elif p.check(path + ("documents", key), docs[key], number_check(1, integer=True)):
                d[key] = int(docs[key])
        p.check(path + ("documents", "pick"), d["pick"], choice_check(DOC_PICKS))
        p.check(path + ("documents", "zipf_exponent"), d["zipf_exponent"], number_check(0, strict=True))
        out["documents"] = d
    conv = w.get("conversations")
    if conv is not None and p.mapping(path + ("conversations",), conv, "count, turns"):
        p.keys(path + ("conversations",), conv, ("count", "turns"))
        c: dict[str, Any] = {}
        for key in ("count", "turns"):
            if key not in conv:
                p.add(path + ("conversations", key), "required key is missing", True)
            elif p.check(path + ("conversations", key), conv[key], number_check(1, integer=True)):
                c[key] = int(conv[key])
        out["conversations"] = c
    if w.get("sessions") is not None:
        out["sessions"] = _check_sessions(p, w["sessions"], path + ("sessions",), dataset is not None)
        if conv is not None:
            p.add(
                path + ("conversations",),
                "cannot be combined with workload.sessions (sessions are the multi-turn workload)",
                True,
            )
        if fmt == "token_ids":
            p.add(
                path + ("prompt_format",),
                "expected text with workload.sessions (each turn carries the answer's text), got 'token_ids'",
            )
    if w.get(ADAPTERS_KEY) is not None:  # LoRA adapters (loadgen.workload.adapters)
        out[ADAPTERS_KEY] = check_adapters(p, path + (ADAPTERS_KEY,), w[ADAPTERS_KEY])
    ignore_eos = w.get("ignore_eos", True)
    if not isinstance(ignore_eos, bool):
        p.add(path + ("ignore_eos",), f"expected true or false, got {describe(ignore_eos)}")
    out["ignore_eos"] = ignore_eos
    extra = w.get("extra_body", {}) or {}
    if p.mapping(path + ("extra_body",), extra, "extra request fields such as temperature"):
        reserved = {"prompt", "messages", "max_tokens", "max_completion_tokens", "model", "stream", "stream_options"}
        for key in extra:
            if key in reserved:
                p.add(path + ("extra_body", key), "is set by rampwatch itself and cannot be overridden", True)
            elif key == "cache_salt":  # one per run, recorded: the run's flag, not the file's
                p.add(path + ("extra_body", key), "is the run's: use --cache-salt SALT (auto, none or a salt)", True)
        out["extra_body"] = dict(extra)
    if w.get("images") is not None:  # loadgen.workload.images
        images = check_images(p, path + ("images",), w["images"], endpoint)
        if w.get("sessions") is not None:
            p.add(path + ("images",), "cannot be combined with workload.sessions (yet)", True)
        if images is not None:
            out["images"] = images
    out.update(check_reasoning(p, path, w, endpoint))
    return out


def check_slo(p: Problems, path: KeyPath, value: Any) -> dict[str, float] | None:
    """An ``slo:`` mapping (the scenario's, or a mixture class's): the objectives set."""
    slo: dict[str, float] = {}
    if value is not None and p.mapping(path, value, "ttft_ms, tpot_ms, e2el_ms"):
        p.keys(path, value, SLO_KEYS)
        for key in SLO_KEYS:
            if value.get(key) is not None and p.check(path + (key,), value[key], number_check(0, strict=True)):
                slo[key] = float(value[key])
    return slo or None


def _check_think(p: Problems, path: KeyPath, value: Any) -> dict[str, Any] | None:
    """Think time in seconds: a number, or ``{dist: fixed|uniform|exponential|lognormal, …}``."""
    if is_number(value):
        return {"dist": "fixed", "value": float(value)} if p.check(path, value, number_check(0)) else None
    if not p.mapping(path, value, f"seconds, or {{dist: {'|'.join(THINK_DISTS)}, …}}"):
        return None
    dist = value.get("dist")
    if not p.check(path + ("dist",), dist, choice_check(THINK_DISTS)):
        return None
    fields = {
        "fixed": ("value",),
        "uniform": ("min", "max"),
        "exponential": ("mean",),
        "lognormal": ("median", "sigma"),
    }[dist]
    optional = ("max",) if dist in ("exponential", "lognormal") else ()
    p.keys(path, value, ("dist", *fields, *optional))
    out: dict[str, Any] = {"dist": dist}
    ok = True
    for name in (*fields, *optional):
        if name not in value:
            if name in fields:
                p.add(path + (name,), "required key is missing", True)
                ok = False
        elif p.check(path + (name,), value[name], number_check(0)):
            out[name] = float(value[name])
        else:
            ok = False
    if ok and dist == "uniform" and out["min"] > out["max"]:
        p.add(path + ("max",), f"expected a number >= min ({out['min']:g}), got {describe(value['max'])}")
        ok = False
    return out if ok else None


def _check_sessions(p: Problems, value: Any, path: KeyPath, has_dataset: bool) -> dict[str, Any]:
    """``workload.sessions``: turns per session (a length distribution; with a dataset,
    at most this many of each conversation's turns) and the think time after each answer."""
    if not p.mapping(path, value, "turns, think_time_s"):
        return {}
    p.keys(path, value, SESSION_KEYS)
    out: dict[str, Any] = {}
    if value.get("turns") is not None:
        out["turns"] = check_length(p, path + ("turns",), value["turns"])
    elif not has_dataset:
        p.add(path + ("turns",), "required key is missing (a turn count or a distribution)", True)
    out["think_time_s"] = _check_think(p, path + ("think_time_s",), value.get("think_time_s", 0))
    return out
