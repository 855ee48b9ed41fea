"""Tokenizers the workload side counts and synthesises prompts with.

``load_tokenizer(None)`` gives the simulator's built-in word tokenizer; a path or a
Hugging Face name gives a wrapped ``transformers`` tokenizer. Names are looked up in the
local Hugging Face cache only: rampwatch never downloads a tokenizer behind the user's back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rampwatch.core.errors import UserError


@runtime_checkable
class TokenizerLike(Protocol):
    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...


class SimTokenizerAdapter:
    """The simulator's tokenizer with the extras prompt synthesis uses."""

    name = "rampwatch-sim"

    def __init__(self) -> None:
        from rampwatch.core.tokenizer import SimTokenizer

        self._tok = SimTokenizer()
        self.vocab_size = self._tok.vocab_size
        self.special_ids: frozenset[int] = frozenset()

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text)

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(ids))

    def count(self, text: str) -> int:
        return self._tok.count(text)


class HFTokenizer:
    """A ``transformers`` tokenizer counted the way a server counts a prompt's text
    (no special tokens added: the server adds BOS or a chat template itself)."""

    def __init__(self, tokenizer: Any, name: str) -> None:
        self._tok = tokenizer
        self.name = name
        self.vocab_size = len(tokenizer)
        self.special_ids = frozenset(getattr(tokenizer, "all_special_ids", []) or [])
        # A fast tokenizer's Rust backend gives the same ids and text without the
        # wrapper's per-call Python work (a third of a prompt's build time); prompt
        # synthesis encodes and decodes several times per request.
        self._backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None

    def encode(self, text: str) -> list[int]:
        if self._backend is not None:
            return self._backend.encode(text, add_special_tokens=False).ids
        return list(self._tok.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        if self._backend is not None:
            return self._backend.decode(list(ids), skip_special_tokens=False)
        return self._tok.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def count(self, text: str) -> int:
        return len(self.encode(text))


def count_tokens(tokenizer: TokenizerLike, text: str) -> int:
    counter = getattr(tokenizer, "count", None)
    return counter(text) if counter else len(tokenizer.encode(text))


def load_tokenizer(name_or_path: str | None) -> TokenizerLike:
    """The simulator's tokenizer for None; else a local directory or a Hugging Face name
    already in the local cache. Anything that would need a download is a UserError."""
    if name_or_path is None:
        return SimTokenizerAdapter()
    import os

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # pragma: no cover - transformers is a dependency
        raise UserError(f"--tokenizer {name_or_path}: the transformers package is not installed ({exc})") from None
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not path.is_dir():
            raise UserError(f"--tokenizer {name_or_path}: expected a directory holding tokenizer files, got a file")
        try:
            tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception as exc:
            raise UserError(
                f"--tokenizer {name_or_path}: cannot load a tokenizer from this directory ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            ) from None
        return HFTokenizer(tok, str(path))
    try:
        tok = AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)
    except Exception:
        raise UserError(
            f"--tokenizer {name_or_path}: not a local directory and not in the Hugging Face cache; "
            f"rampwatch does not download tokenizers: fetch it first "
            f"(huggingface-cli download {name_or_path}) or pass a local path"
        ) from None
    return HFTokenizer(tok, name_or_path)
