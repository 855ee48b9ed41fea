"""A request ready to send: what the workload side hands to the streaming client."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rampwatch.core.timeline import RequestRecord

Endpoint = Literal["completions", "chat"]


@dataclass(slots=True)
class PreparedRequest:
    """The body of one OpenAI-compatible request, minus `model`, `stream` and
    `stream_options`, which the client adds.

    completions: ``payload = {"prompt": str | list[int], "max_tokens": n, ...}``
    chat:        ``payload = {"messages": [...], "max_completion_tokens": n, ...}``

    A request built in the builder process carries its payload already encoded
    (``loadgen.workload.encoded_payload.EncodedPayload``, a mapping of the same fields):
    the client splices those bytes into its body instead of encoding megabytes of images.
    """

    endpoint: Endpoint
    payload: Mapping[str, Any]
    expected_prompt_tokens: int  # what the workload built it to be (tokenizer count)
    max_tokens: int
    tag: str | None = None  # e.g. "doc-3", "conv-12/turn-2"
    extra: dict[str, Any] = field(default_factory=dict)
    request_class: str | None = None  # a mixture's class name
    adapter: str | None = None  # the LoRA adapter sent to: the request's model (loadgen.workload.adapters)
    session: int | None = None  # a session workload's conversation id
    turn: int | None = None  # this request's turn in its session (1-based)
    images: int | None = None  # how many images it carries (None: a text workload)
    # Keep the answer's text on the record (a session's next turn carries it).
    keep_text: bool = False

    def labels(self) -> dict[str, Any]:
        """What every record of this request carries from it (its mixture class, session,
        turn, adapter and image count), whether it was answered, failed or never sent."""
        return {
            "request_class": self.request_class,
            "session": self.session,
            "turn": self.turn,
            "adapter": self.adapter,
            "images": self.images,
        }

    def unanswered(
        self, request_id: int, scheduled_at: float, sent_at: float, end_at: float, error_class: str, error: str
    ) -> RequestRecord:
        """The record of this request when it ended without an answer from the server:
        cancelled before it was sent, or failed around the client (a client bug, a lost
        load worker); recorded all the same, never lost. It carries what the client's own
        record of a failed request does: the prompt's expected size and the tag."""
        return RequestRecord(
            id=request_id,
            scheduled_at=scheduled_at,
            sent_at=sent_at,
            end_at=end_at,
            prompt_tokens=self.expected_prompt_tokens,
            tokens_from_usage=False,
            scenario_tag=self.tag,
            error_class=error_class,
            error=error,
            **self.labels(),
        )
