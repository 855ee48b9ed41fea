"""Building a scenario's requests one by one (``RequestFactory``): prompts of the lengths
its workload draws, shared system prompts and documents, conversations, dataset entries,
a trace's rows, or a mixture's classes."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rampwatch.core.errors import UserError
from rampwatch.core.figures.adapters import ADAPTERS_KEY
from rampwatch.core.figures.classes import MIX_KEY
from rampwatch.loadgen.workload.adapters import AdapterPicker
from rampwatch.loadgen.workload.datasets import load_dataset
from rampwatch.loadgen.workload.images import ImageMaker, with_images
from rampwatch.loadgen.workload.mixture import MixtureFactory
from rampwatch.loadgen.workload.prompts import compose_exact, join, random_token_ids, synth_text
from rampwatch.loadgen.workload.reasoning_spec import reasoning_fields
from rampwatch.loadgen.workload.requests import PreparedRequest
from rampwatch.loadgen.workload.scenario import Scenario
from rampwatch.loadgen.workload.schedule_spec import TRACE_KIND
from rampwatch.loadgen.workload.tokenizers import count_tokens, load_tokenizer
from rampwatch.loadgen.workload.trace_replay import TraceRequests, trace_of


def sample_length(spec: dict[str, Any], rng: np.random.Generator) -> int:
    dist = spec["dist"]
    if dist == "fixed":
        return int(spec["value"])
    if dist == "uniform":
        return int(rng.integers(spec["min"], spec["max"] + 1))
    if dist == "normal":
        value = rng.normal(spec["mean"], spec["std"])
    else:
        value = spec["median"] * math.exp(spec["sigma"] * rng.standard_normal())
    lo, hi = spec.get("min", 1), spec.get("max", math.inf)
    return int(min(max(round(value), lo, 1), hi))


def length_bounds(spec: dict[str, Any]) -> tuple[int, float]:
    """Smallest and largest length a distribution can produce."""
    if spec["dist"] == "fixed":
        return spec["value"], spec["value"]
    return max(1, spec.get("min", 1)), spec.get("max", math.inf)


@dataclass(slots=True)
class _Conversation:
    id: int
    doc: int | None
    turn: int = 0
    # Previous turns as (user content, assistant content); text or token ids.
    history: list[tuple[Any, Any]] = field(default_factory=list)


class RequestFactory:
    """Builds the scenario's requests one by one; the same scenario (seed) and tokenizer
    give the same sequence. Prompt lengths are exact with the simulator's tokenizer; with
    a sub-word tokenizer ``expected_prompt_tokens`` is the count actually achieved.

    ``cache_salt`` (the run's ``--cache-salt``) goes in every request's body: vLLM never
    lets requests with different salts share prefix-cache blocks, so a run's requests
    share their declared prefixes with each other and with no other run's."""

    def __init__(self, scenario: Scenario, tokenizer=None, cache_salt: str | None = None) -> None:

        self.scenario = scenario
        self.cache_salt = cache_salt
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(None)
        self.workload = scenario.workload
        self.endpoint = scenario.endpoint
        self.token_ids = self.workload.get("prompt_format") == "token_ids"
        self._rng = np.random.default_rng([scenario.seed, 101])
        self._count = 0
        self._docs: dict[int, Any] = {}
        self._shared_counts: dict[str, int] = {}
        self._system: Any = None
        self.doc_probs: np.ndarray | None = None
        docs = self.workload.get("documents")
        if docs:
            ranks = np.arange(1, docs["count"] + 1, dtype=float)
            weights = ranks ** -docs["zipf_exponent"] if docs["pick"] == "zipf" else np.ones_like(ranks)
            self.doc_probs = weights / weights.sum()
        self._conversations: list[_Conversation] = []
        self._next_conversation = 0
        self.dataset = None
        self._order: list[int] = []
        self._trace: TraceRequests | None = None
        spec = scenario.schedule_spec
        if spec.get("kind") == TRACE_KIND:
            self._trace = TraceRequests(
                trace_of(spec), spec["block_tokens"], self.endpoint, self.token_ids, scenario.seed, self.tokenizer
            )
        if self.workload.get("dataset"):
            ds = self.workload["dataset"]
            self.dataset = load_dataset(ds["path"], ds["format"])
        # Images after the user's text (loadgen.workload.images); None: a text workload.
        self._images = ImageMaker(self.workload["images"], scenario.seed) if self.workload.get("images") else None
        # LoRA adapters: each request's model picked by weight (loadgen.workload.adapters).
        adapters = self.workload.get(ADAPTERS_KEY)
        self._adapters = AdapterPicker(adapters, scenario.seed) if adapters else None
        # A mixture: each class builds its requests with its own factory (loadgen.workload.mixture).
        self._mixture = (
            MixtureFactory(scenario, self.tokenizer, functools.partial(RequestFactory, cache_salt=cache_salt))
            if MIX_KEY in self.workload
            else None
        )

    @property
    def costly(self) -> bool:
        """Its requests carry images: built in a process of their own (``requests_ahead``)."""
        if self._mixture is not None:
            return any(factory.costly for factory in self._mixture.factories)
        return self._images is not None

    # -- shared parts (built once, identical in every request)

    def _piece(self, n: int, rng: np.random.Generator) -> Any:

        return random_token_ids(self.tokenizer, n, rng) if self.token_ids else synth_text(self.tokenizer, n, rng)

    def system_prompt(self) -> Any:
        spec = self.workload.get("system_prompt")
        if not spec:
            return None
        if self._system is None:
            if "text" in spec:
                self._system = spec["text"]
            else:
                self._system = self._piece(spec["tokens"], np.random.default_rng([self.scenario.seed, 1]))
        return self._system

    def document(self, index: int) -> Any:
        if index not in self._docs:
            rng = np.random.default_rng([self.scenario.seed, 2, index])
            self._docs[index] = self._piece(self.workload["documents"]["tokens"], rng)
        return self._docs[index]

    # -- request building

    def count_of(self, part: Any) -> int:

        if part is None:
            return 0
        return len(part) if isinstance(part, list) else count_tokens(self.tokenizer, part)

    def count_shared(self, part: Any) -> int:
        """``count_of`` for the parts many requests share (system prompt, documents):
        counted once, since a document can be thousands of tokens."""
        if part is None or isinstance(part, list):
            return self.count_of(part)
        count = self._shared_counts.get(part)
        if count is None:
            count = self._shared_counts[part] = self.count_of(part)
        return count

    def _fresh_tail(self, prefix_parts: list[Any], n: int) -> tuple[Any, Any, int]:
        """(new user content, full completions prompt, the prompt's token count) with n
        new tokens after the parts."""

        parts = [x for x in prefix_parts if x]
        if self.token_ids:
            tail = random_token_ids(self.tokenizer, n, self._rng)
            flat = [i for part in parts for i in part]
            return tail, flat + tail, len(flat) + len(tail)
        prefix = join(parts)
        if not prefix:
            text, count = compose_exact(self.tokenizer, "", n, self._rng)
            return text, text, count
        target = self.count_of(prefix + "\n\n") + n
        full, count = compose_exact(self.tokenizer, prefix, target, self._rng)
        return full[len(prefix) + 2 :] if len(full) > len(prefix) else "", full, count

    def _pick_doc(self) -> int | None:
        if self.doc_probs is None:
            return None
        return int(self._rng.choice(len(self.doc_probs), p=self.doc_probs))

    def _conversation(self) -> _Conversation | None:
        conv = self.workload.get("conversations")
        if not conv:
            return None
        slot = int(self._rng.integers(conv["count"]))
        while len(self._conversations) < conv["count"]:
            self._conversations.append(self._new_conversation())
        c = self._conversations[slot]
        if c.turn >= conv["turns"]:
            c = self._conversations[slot] = self._new_conversation()
        return c

    def _new_conversation(self) -> _Conversation:
        c = _Conversation(id=self._next_conversation, doc=self._pick_doc())
        self._next_conversation += 1
        return c

    def next_request(self) -> PreparedRequest:
        if self._mixture is not None:
            return self._mixture.next_request()
        index = self._count
        self._count += 1
        if self._trace is not None:  # the i-th request is the trace's i-th row
            body, prompt_tokens, max_tokens, row = self._trace.row(index)
            return self.finish_request(body, prompt_tokens, max_tokens, None, {"index": index, **row})
        if self.dataset is not None:
            return self._dataset_request(index)
        w = self.workload
        n_in = sample_length(w["input_tokens"], self._rng)
        n_out = sample_length(w["output_tokens"], self._rng)
        conv = self._conversation()
        doc = conv.doc if conv is not None else self._pick_doc()
        system = self.system_prompt()
        doc_part = self.document(doc) if doc is not None else None
        history = conv.history if conv is not None else []
        extra: dict[str, Any] = {"index": index}
        tags = []
        if doc is not None:
            extra["doc"] = doc
            tags.append(f"doc-{doc}")
        if conv is not None:
            conv.turn += 1
            extra.update(conversation=conv.id, turn=conv.turn)
            tags = [f"conv-{conv.id}/turn-{conv.turn}"]
        extra["shared_prefix_tokens"] = self.count_shared(system) + self.count_shared(doc_part)
        if self.endpoint == "chat":
            first_user_prefix = [doc_part] if not history else []
            question, content, _ = self._fresh_tail(first_user_prefix, n_in)
            messages = [{"role": "system", "content": system}] if system else []
            for user, answer in history:
                messages.append({"role": "user", "content": user})
                messages.append({"role": "assistant", "content": answer})
            messages.append({"role": "user", "content": content})
            expected = sum(self.count_of(m["content"]) for m in messages)
            payload: dict[str, Any] = {"messages": messages, "max_completion_tokens": n_out}
            user_turn = content
        else:
            prefix_parts: list[Any] = [system, doc_part]
            for user, answer in history:
                prefix_parts += [user, answer]
            question, prompt, expected = self._fresh_tail(prefix_parts, n_in)
            payload = {"prompt": prompt, "max_tokens": n_out}
            user_turn = question
        if conv is not None:
            conv.history.append((user_turn, self._piece(n_out, self._rng)))
        return self.finish_request(payload, expected, n_out, "/".join(tags) or None, extra)

    def _dataset_request(self, index: int) -> PreparedRequest:
        assert self.dataset is not None
        if not self._order:
            self._order = self._rng.permutation(len(self.dataset)).tolist()
        entry = self.dataset[self._order.pop(0)]
        system = self.system_prompt()
        out_spec = self.workload.get("output_tokens")
        if out_spec:
            n_out = sample_length(out_spec, self._rng)
        elif entry.answer is not None:
            n_out = max(1, self.count_of(entry.answer))
        else:
            raise UserError(
                f"{self.workload['dataset']['path']}: entries carry no answer to size the output; "
                "set workload.output_tokens"
            )
        if self.endpoint == "chat":
            messages = ([{"role": "system", "content": system}] if system else []) + entry.as_messages()
            payload: dict[str, Any] = {"messages": messages, "max_completion_tokens": n_out}
            expected = sum(self.count_of(m["content"]) for m in messages)
        else:
            prompt = join([system or "", entry.as_text()])
            payload = {"prompt": prompt, "max_tokens": n_out}
            expected = self.count_of(prompt)
        return self.finish_request(payload, expected, n_out, None, {"index": index})

    def finish_request(
        self, payload: dict[str, Any], expected: int, n_out: int, tag: str | None, extra: dict[str, Any]
    ) -> PreparedRequest:
        """The request of a built body: ``ignore_eos``, the workload's ``extra_body`` and
        the run's ``cache_salt`` added."""
        if self.workload.get("ignore_eos", True):
            payload["ignore_eos"] = True
        payload.update(self.workload.get("extra_body") or {})
        payload.update(reasoning_fields(self.workload))
        if self.cache_salt is not None:
            payload["cache_salt"] = self.cache_salt
        images = None
        if self._images is not None:
            parts = self._images.next_parts()
            payload["messages"] = with_images(payload["messages"], parts)
            images = len(parts)
        adapter = None
        if self._adapters is not None:  # a session keeps one adapter for all its turns
            adapter = self._adapters.for_session(extra["session"]) if "session" in extra else self._adapters.next()
        return PreparedRequest(
            endpoint=self.endpoint,  # type: ignore[arg-type]
            payload=payload,
            expected_prompt_tokens=expected,
            max_tokens=n_out,
            tag=tag,
            extra=extra,
            images=images,
            adapter=adapter,
        )
