"""Prompts from files: ShareGPT JSON, JSONL of prompts, JSONL of chat messages.

- ``sharegpt``: a JSON list of ``{"conversations": [{"from": "human"|"gpt", "value": …}, …]}``.
  As in ``vllm bench serve``, the first turn is the prompt and the second the answer
  whose token count gives the output length; entries with fewer than two turns are skipped.
- ``prompts``: one ``{"prompt": "…"}`` per line.
- ``messages``: one ``{"messages": [{"role": …, "content": …}, …]}`` per line.

A session workload (``loadgen.workload.sessions``) plays a whole conversation instead:
``DatasetEntry.user_turns`` are its user messages in order, each with the length of the
answer that followed it in the file (sharegpt) to size that turn's ``max_tokens``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rampwatch.core.errors import UserError

DATASET_FORMATS = ("auto", "sharegpt", "prompts", "messages")
CHAT_ROLES = ("system", "user", "assistant", "tool", "developer")


@dataclass(slots=True)
class DatasetEntry:
    prompt: str | None = None  # a plain prompt (sharegpt, prompts)
    messages: list[dict[str, str]] | None = None  # chat messages (messages)
    answer: str | None = None  # the reference answer (sharegpt): its length sets max_tokens
    # Every user turn of the conversation with the answer after it (None: none recorded),
    # for sessions; a plain request uses only the first exchange.
    turns: list[tuple[str, str | None]] | None = None

    def user_turns(self) -> list[tuple[str, str | None]]:
        if self.turns is not None:
            return self.turns
        if self.messages is not None:
            return _turns_of(self.messages)
        return [(self.prompt or "", self.answer)]

    def system_text(self) -> str | None:
        """The conversation's own system message (messages datasets), if it has one."""
        for m in self.messages or []:
            if m["role"] in ("system", "developer"):
                return m["content"]
        return None

    def as_messages(self) -> list[dict[str, str]]:
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.prompt or ""}]

    def as_text(self) -> str:
        if self.prompt is not None:
            return self.prompt
        return "\n\n".join(f"{m['role']}: {m['content']}" for m in self.messages or [])


def _turns_of(messages: list[dict[str, str]]) -> list[tuple[str, str | None]]:
    """(user text, the assistant answer right after it or None) for each user message."""
    out: list[tuple[str, str | None]] = []
    for i, m in enumerate(messages):
        if m["role"] != "user":
            continue
        following = messages[i + 1] if i + 1 < len(messages) else None
        answer = following["content"] if following is not None and following["role"] == "assistant" else None
        out.append((m["content"], answer))
    return out


_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "assistant": "assistant",
}


def _detect(path: Path) -> str:
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        head = fh.read(4096).lstrip()
    if head.startswith("[") or path.suffix.lower() == ".json":
        return "sharegpt"
    first = head.splitlines()[0] if head else ""
    if '"messages"' in first:
        return "messages"
    if '"prompt"' in first:
        return "prompts"
    raise UserError(
        f"{path}: cannot tell the dataset format (expected a ShareGPT JSON list, or JSONL lines "
        f'with "prompt" or "messages"); set workload.dataset.format'
    )


def _sharegpt(path: Path) -> list[DatasetEntry]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text ({exc.reason})") from None
    if not isinstance(data, list):
        raise UserError(
            f'{path}: expected a ShareGPT JSON list of {{"conversations": [...]}}, got a {type(data).__name__}'
        )
    entries = []
    for i, item in enumerate(data):
        conv = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(conv, list):
            raise UserError(f'{path}: entry {i}: expected a mapping with a "conversations" list')
        if len(conv) < 2:
            continue
        messages = []
        for j, turn in enumerate(conv):
            if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
                if j >= 2:  # beyond the exchange vllm bench reads: the conversation ends there
                    break
                raise UserError(f'{path}: entry {i}: conversations[{j}]: expected {{"from": …, "value": "text"}}')
            role = _SHAREGPT_ROLES.get(str(turn.get("from", "")).lower())
            if role is not None:
                messages.append({"role": role, "content": turn["value"]})
        # As vllm bench: the first two turns are the prompt and its answer, whatever their roles.
        first, second = conv[0]["value"], conv[1]["value"]
        entries.append(DatasetEntry(prompt=first, answer=second, turns=_turns_of(messages) or [(first, second)]))
    return entries


def _jsonl(path: Path, key: str) -> list[DatasetEntry]:
    entries = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text ({exc.reason})") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        value = item.get(key) if isinstance(item, dict) else None
        if key == "prompt":
            if not isinstance(value, str):
                raise UserError(f'{path}:{lineno}: expected {{"prompt": "text"}}')
            entries.append(DatasetEntry(prompt=value))
            continue
        messages = chat_messages(value)
        if messages is None:
            raise UserError(
                f'{path}:{lineno}: expected {{"messages": [{{"role": "user", "content": "text"}}, …]}} '
                f"with roles among {', '.join(CHAT_ROLES)}"
            )
        entries.append(DatasetEntry(messages=messages))
    return entries


def chat_messages(value: Any) -> list[dict[str, str]] | None:
    """A non-empty list of ``{"role", "content"}`` messages (roles among ``CHAT_ROLES``,
    text content), copied down to those two keys; None when it is not one."""
    if not (
        isinstance(value, list)
        and value
        and all(
            isinstance(m, dict) and m.get("role") in CHAT_ROLES and isinstance(m.get("content"), str) for m in value
        )
    ):
        return None
    return [{"role": m["role"], "content": m["content"]} for m in value]


def load_dataset(path: str | Path, fmt: str = "auto") -> list[DatasetEntry]:
    """All usable entries of a dataset file; a bad file is a UserError naming it."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: dataset file not found")
    if fmt not in DATASET_FORMATS:
        raise UserError(f"{path}: unknown dataset format {fmt!r} (expected one of {', '.join(DATASET_FORMATS)})")
    if fmt == "auto":
        fmt = _detect(path)
    if fmt == "sharegpt":
        entries = _sharegpt(path)
    else:
        entries = _jsonl(path, "prompt" if fmt == "prompts" else "messages")
    if not entries:
        raise UserError(f"{path}: no usable entries in this {fmt} dataset")
    return entries
