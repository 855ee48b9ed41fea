"""Polling ``/metrics`` and normalising it into ``ServerSample``s.

``parse_metrics`` is pure. To stay cheap at one scrape per second it drops, before the
Prometheus parser sees them, every line that cannot matter: comments, other exporters'
families (``python_*``, ``process_*``, ``http_*``), ``_created`` lines other than the
identity counter's, and histogram ``_bucket`` lines outside ``RAW_BUCKET_FAMILIES``.
On the real vLLM 0.32 capture (~650 lines) that leaves ~150 lines to parse.

``ServerSample.raw`` keeps every remaining server sample (gauges, counters, histogram
``_sum``/``_count``, and the buckets of the server latency histograms) as
``{'name{label="v",...}': value}`` with labels sorted, except ``vllm:cache_config_info``
which is static and goes to the run header instead (``cache_config_from_metrics``), and
only up to ``MAX_RAW_SERIES`` series (past that, none: the summed fields stand alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from ssl import SSLContext
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from rampwatch.core.redact import redact_text
from rampwatch.core.text import printable_value, server_text
from rampwatch.core.timeline import ServerSample
from rampwatch.loadgen.server import backends
from rampwatch.loadgen.server.lora_info import LORA_INFO, lora_fields
from rampwatch.loadgen.transport import redirects

log = logging.getLogger(__name__)

_CACHE_CONFIG = "vllm:cache_config_info"
_KEEP_CREATED = frozenset(backends.CREATED_SAMPLE.values())
_KEEP_BUCKETS = tuple(f + "_bucket" for f in backends.RAW_BUCKET_FAMILIES)


def _relevant_lines(text: str) -> list[str]:
    keep = []
    prefixes = backends.PREFIXES
    for line in text.splitlines():
        if not line.startswith(prefixes):
            continue
        brace = line.find("{")
        name = line[:brace] if brace >= 0 else line.split(" ", 1)[0]
        if name.endswith("_created"):
            if name not in _KEEP_CREATED:
                continue
        elif name.endswith("_bucket"):
            if not name.startswith(_KEEP_BUCKETS):
                continue
        elif name == _CACHE_CONFIG:
            continue
        keep.append(line)
    return keep


def read_samples(text: str) -> list[backends.Sample]:
    """The relevant samples of an exposition as ``(name, labels, value)``."""
    lines = _relevant_lines(text)
    if not lines:
        return []
    out: list[backends.Sample] = []
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for s in family.samples:
            # label values (model_name, gpu, …) are the server's text: safe before anything shows them
            out.append((s.name, printable_value(s.labels, one_line=True), float(s.value)))
    return out


def sample_key(name: str, labels: dict[str, str]) -> str:
    if not labels:
        return name
    inner = ",".join(f'{k}="{labels[k]}"' for k in sorted(labels))
    return f"{name}{{{inner}}}"


# A sample's rejected series kept to name them (a hostile page may hold thousands).
MAX_REJECTED_SERIES = 20


def _unusable(value: float) -> str | None:
    """Why a value is none a server could mean, or None if it is usable: every series read
    (request counts, token counters, KV usage, `_sum`/`_count`, bucket counts, GPU gauges)
    is finite and at least zero."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value < 0:
        return f"negative ({value:g})"
    return None


def screen_samples(samples: list[backends.Sample]) -> tuple[list[backends.Sample], dict[str, str]]:
    """``(kept, rejected)``: NaN, infinite and negative values dropped, and a series given
    twice on one page (same name and labels) kept once, at its last value, never summed;
    ``rejected`` says for each series dropped or doubled (``sample_key``) what was done,
    for at most ``MAX_REJECTED_SERIES`` of them."""
    kept: dict[str, backends.Sample] = {}
    rejected: dict[str, str] = {}
    for name, labels, value in samples:
        key = sample_key(name, labels)
        unusable = _unusable(value)
        note: str | None
        if unusable is not None:
            note = f"{unusable}: dropped"
        else:
            note = "given twice on the page: the last value kept, not the sum" if key in kept else None
            kept[key] = (name, labels, value)
        if note is not None and len(rejected) < MAX_REJECTED_SERIES:
            rejected.setdefault(key, note)
    return list(kept.values()), rejected


# A vLLM page keeps ~150 series after the line filter; data-parallel engines times LoRA
# adapters a few thousand. A page with more keeps its summed fields but not its raw series:
# handing 95k of them to the load process each second costs it ~25 ms of unpickling, and
# the recording ~4 MB a second.
MAX_RAW_SERIES = 5000


# Counters a coherent server keeps as part <= whole (both cumulative): prefix-cache hits of
# its queries, multimodal-cache hits of its queries, accepted draft tokens of those drafted.
PART_OF_WHOLE = (
    ("prefix_hits_total", "prefix_queries_total"),
    ("mm_cache_hits_total", "mm_cache_queries_total"),
    ("spec_accepted_tokens_total", "spec_draft_tokens_total"),
)


def drop_incoherent(
    fields: dict[str, float | None],
    per_engine: dict[str, dict[str, float]],
    by_position: dict[str, float],
    rejected: dict[str, str],
) -> dict[str, float]:
    """Drops (sets to None, per engine too) each ``PART_OF_WHOLE`` pair whose part exceeds
    its whole, noting it in ``rejected``, so that no ratio over 100 % is shown; returns
    the per-position accepted counts kept (none when the drafts were dropped, or one
    position claims more accepted than there were drafts)."""
    for part, whole in PART_OF_WHOLE:
        p, w = fields.get(part), fields.get(whole)
        if p is not None and w is not None and p > w:
            fields[part] = fields[whole] = None
            for values in per_engine.values():
                values.pop(part, None)
                values.pop(whole, None)
            if len(rejected) < MAX_REJECTED_SERIES:
                rejected[part] = f"{p:g} above {whole} {w:g}: both dropped"
    drafts = fields.get("spec_drafts_total")
    if fields.get("spec_draft_tokens_total") is None or (
        drafts is not None and any(v > drafts for v in by_position.values())
    ):
        return {}
    return by_position


def parse_metrics(text: str, url: str, t: float) -> ServerSample:
    """One scrape's text -> ``ServerSample`` (``ok=False`` if the text cannot be parsed)."""
    started = time.perf_counter()
    try:
        samples, rejected = screen_samples(read_samples(text))
    except ValueError as exc:
        # the parser quotes the page's line: the server's text
        return ServerSample(t=t, url=url, ok=False, error=server_text(f"unparsable /metrics: {exc}")[:300])
    backend = backends.detect_backend(name for name, _, _ in samples)
    fields, per_engine, created = backends.extract_fields(backend, samples)
    by_position = drop_incoherent(fields, per_engine, backends.accepted_by_position(samples), rejected)
    # The LoRA state's history stays on the page, one series per state: read, not kept raw.
    lora = lora_fields(samples)
    raw = {
        sample_key(name, labels): value
        for name, labels, value in samples
        if not name.endswith("_created") and name != LORA_INFO
    }
    if len(raw) > MAX_RAW_SERIES:
        raw = {}  # the summed fields above stand; thousands of series a second would swamp the run
    return ServerSample(
        t=t,
        url=url,
        ok=True,
        backend=backend,
        scrape_s=time.perf_counter() - started,
        per_engine=per_engine,
        created=created,
        raw=raw,
        rejected=rejected,
        **lora,
        spec_accepted_by_position=by_position,
        # fields holds only ServerSample's float | None gauge and counter fields (extract_fields)
        **fields,  # type: ignore[arg-type]
    )


# A DCGM exporter's gauges rampwatch reads (dcgm-exporter's default counters,
# etc/default-counters.csv), per `gpu` label, with their units: GPU_UTIL in %, FB_USED and
# FB_FREE in MiB, POWER_USAGE in W, SM_CLOCK in MHz. The default set has no total memory
# (used + free stands for it) and none of the profiling (DCP) gauges such as
# DCGM_FI_PROF_GR_ENGINE_ACTIVE, so utilisation is GPU_UTIL's coarse "a kernel was
# running" share. Its energy counter (TOTAL_ENERGY_CONSUMPTION, mJ) is not read: energy
# is integrated from the power samples, the same way for NVML and DCGM.
DCGM_GAUGES = {
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_DEV_FB_USED": "mem_used_mib",
    "DCGM_FI_DEV_FB_FREE": "mem_free_mib",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
}


def parse_dcgm(text: str, url: str, t: float) -> ServerSample:
    """One DCGM exporter page -> a GPU sample (``backend="dcgm"``, gauges in ``gpus`` by
    the ``gpu`` label); ``ok=False`` if it does not parse or holds none of ``DCGM_GAUGES``."""
    started = time.perf_counter()
    lines = []
    for line in text.splitlines():
        if line.startswith("DCGM_FI_DEV_"):
            brace = line.find("{")
            name = line[:brace] if brace >= 0 else line.split(" ", 1)[0]
            if name in DCGM_GAUGES:
                lines.append(line)
    gpus: dict[str, dict[str, float]] = {}
    try:
        for family in text_string_to_metric_families("\n".join(lines) + "\n"):
            for s in family.samples:
                # the label is shown on screen: made safe like any text from a server
                gpu = server_text(s.labels.get("gpu") or s.labels.get("UUID") or "0")[:40]
                if _unusable(float(s.value)) is None:  # a NaN or negative gauge is no reading
                    gpus.setdefault(gpu, {})[DCGM_GAUGES[s.name]] = float(s.value)
    except ValueError as exc:
        error = server_text(f"unparsable DCGM page: {exc}")[:300]
        return ServerSample(t=t, url=url, ok=False, backend="dcgm", error=error)
    if not gpus:
        return ServerSample(
            t=t,
            url=url,
            ok=False,
            backend="dcgm",
            error="no DCGM_FI_DEV_* GPU gauges on the page (not a DCGM exporter?)",
        )
    ordered = {gpu: gpus[gpu] for gpu in sorted(gpus, key=lambda g: (len(g), g))}  # "2" before "10"
    return ServerSample(t=t, url=url, ok=True, backend="dcgm", scrape_s=time.perf_counter() - started, gpus=ordered)


def page_parser(kind: str) -> Callable[[str, str, float], ServerSample]:
    """How a kind of page a poller reads is parsed: the server's /metrics ("server") or a
    DCGM exporter's ("dcgm")."""
    return parse_dcgm if kind == "dcgm" else parse_metrics


def cache_config_from_metrics(text: str) -> dict[str, str]:
    """Labels of ``vllm:cache_config_info`` (block size, GPU blocks...); ``{}`` if absent."""
    for line in text.splitlines():
        if line.startswith(_CACHE_CONFIG + "{"):
            try:
                for family in text_string_to_metric_families(line + "\n"):
                    for s in family.samples:
                        return dict(s.labels)
            except ValueError:
                return {}
    return {}


# A vLLM /metrics page is ~50-100 KB; many LoRA adapters or engines make it a few hundred.
# Past this the scrape is reported failed instead of read: a runaway exporter must not take
# the load process's memory.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


async def read_capped(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes | None:
    """The response body, or None as soon as it is known to exceed ``max_bytes``."""
    if resp.content_length is not None and resp.content_length > max_bytes:
        return None
    body = bytearray()
    async for chunk in resp.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > max_bytes:
            return None
    return bytes(body)


# A page past this size is parsed in a separate process. In a thread of the load process its
# parse holds the GIL in stretches that delay every wake-up of the load's loop: a 6 MB page
# scraped each second took send lateness p99 from ~2 ms to ~100 ms
# (bench/bench_metrics_lateness.py). A real vLLM page is ~10-100 KB and stays in a thread.
PROCESS_PARSE_BYTES = 256 * 1024


def _parse_serve(conn: Any) -> None:
    """The parse process: pages in, samples out, until its parent closes the pipe (or dies)."""
    with contextlib.suppress(OSError):
        os.nice(10)  # on a busy machine the load's sends come first; a scrape can wait
    while True:
        try:
            body, url, t, kind = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(page_parser(kind)(body.decode("utf-8", errors="replace"), url, t))


class ParseProcess:
    """A process that parses large /metrics pages, spawned on first use (a fresh
    interpreter: the load process may hold an event loop and threads that fork would copy)
    and ended by ``close`` or by its parent's exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: Any = None
        self._process: Any = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def parse(self, body: bytes, url: str, t: float, kind: str = "server") -> ServerSample:
        """Blocking (call it from a worker thread): the page parsed in the other process
        (``kind``: see ``page_parser``)."""
        with self._lock:
            if self._process is None or not self._process.is_alive():
                self._start()
            try:
                self._conn.send((body, url, t, kind))
                sample: ServerSample = self._conn.recv()
            except (EOFError, OSError) as exc:
                self._process = None  # started afresh on the next large page
                return ServerSample(
                    t=t, url=url, ok=False, backend=_FAILED_BACKEND[kind], error=f"metrics parse process failed: {exc}"
                )
            return sample

    def _start(self) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_parse_serve, args=(child,), name="rampwatch-metrics-parse", daemon=True)
        self._process.start()
        child.close()

    def close(self) -> None:
        with self._lock:
            if self._process is None:
                return
            self._conn.close()
            self._process.join(2.0)
            if self._process.is_alive():
                self._process.terminate()
            self._process = None


# How describe_scrape_failure's reasons for an unreachable server start (and, for
# recordings made before it, aiohttp's own exception names).
_CONNECTION_FAILURES = (
    "connection refused",
    "cannot connect",
    "cannot resolve",
    "server disconnected",
    "response body broke off",
    "connection reset",
    "connection error",
    "ClientConnectorError",
    "ClientConnectorDNSError",
    "ServerDisconnectedError",
    "ClientOSError",
)


def is_connection_failure(reason: str) -> bool:
    """A scrape failed because the server could not be reached or dropped the connection
    (not a timeout, a status or a page that does not parse)."""
    return reason.startswith(_CONNECTION_FAILURES)


def describe_scrape_failure(exc: BaseException) -> str:
    """What went wrong with a scrape, in a few words on one line: aiohttp's own messages
    repeat the host and the socket call, and wrap into several lines on a narrow panel.
    The URL is not in it (the sample carries it)."""
    if isinstance(exc, redirects.RedirectRefused):
        return str(exc)
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"cannot resolve the host ({exc.os_error.strerror or exc.os_error})"
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = exc.os_error
        if isinstance(os_error, ConnectionRefusedError):
            return "connection refused"
        reason = os.strerror(os_error.errno) if os_error.errno else str(os_error)
        return f"cannot connect ({reason})"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server disconnected"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "response body broke off"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return "connection reset"
    if isinstance(exc, aiohttp.ClientOSError) and exc.errno:
        return f"connection error ({os.strerror(exc.errno)})"
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__


# The backend a failed scrape of each kind of page carries: a failing DCGM URL must still
# read as GPU telemetry (ServerSample.is_gpu), not as the server's /metrics.
_FAILED_BACKEND = {"server": "unknown", "dcgm": "dcgm"}


class MetricsPoller:
    """Scrapes every URL each ``interval_s`` on its own session, never raising.

    ``urls`` are the server's ``/metrics`` pages, ``dcgm_urls`` DCGM exporters' (GPU
    telemetry, ``parse_dcgm``): both polled together, with the same timeout, size cap,
    headers, TLS and failure handling. Each scrape calls ``on_sample(ServerSample)``; a failed scrape (connection error,
    non-200, timeout after ``timeout_s``, unparsable text) gives ``ok=False`` with the
    reason in ``error``. Polls are aligned on ``start + k * interval_s``; a poll still
    running at the next slot makes the poller skip that slot instead of piling up.
    ``t`` of a sample is ``clock()`` when its response body was fully read.
    """

    def __init__(
        self,
        urls: Sequence[str],
        interval_s: float = 1.0,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        on_sample: Callable[[ServerSample], None] | None = None,
        headers: dict[str, str] | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        ssl: SSLContext | bool = True,
        dcgm_urls: Sequence[str] = (),
    ) -> None:
        """``headers`` go with every scrape; ``ssl`` is aiohttp's (``Connection.ssl()``)."""
        if not urls and not dcgm_urls:
            raise ValueError("MetricsPoller needs at least one URL")
        self.urls = list(urls) + [url for url in dcgm_urls if url not in urls]
        self._kind = {url: "dcgm" for url in dcgm_urls if url not in urls}
        # Samples name their URL as it may be shown and recorded: credentials masked.
        self._shown = {url: redact_text(url) for url in self.urls}
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.clock = clock
        self.on_sample = on_sample or (lambda sample: None)
        self._headers = dict(headers or {})
        self._secrets = {v for v in self._headers.values() if v}
        self._ssl = ssl
        self.max_body_bytes = max_body_bytes
        self.parse_process = ParseProcess()

    async def scrape_once(self, session: aiohttp.ClientSession, url: str) -> ServerSample:
        shown = self._shown.get(url) or redact_text(url)
        kind = self._kind.get(url, "server")

        def failed(error: str) -> ServerSample:
            return ServerSample(
                t=self.clock(),
                url=shown,
                ok=False,
                backend=_FAILED_BACKEND[kind],
                error=server_text(error, self._secrets)[:300],
            )

        try:
            async with redirects.request(session, "GET", url, headers=self._headers) as resp:
                if resp.status != 200:
                    return failed(f"HTTP {resp.status}")
                body = await read_capped(resp, self.max_body_bytes)
                if body is None:
                    return failed(f"body over {self.max_body_bytes:,} bytes (--metrics-max-bytes)")
        except TimeoutError:
            return failed(f"timeout after {self.timeout_s:g} s")
        except Exception as exc:  # aiohttp's ClientError or anything else: a scrape must never take the run down
            return failed(describe_scrape_failure(exc))
        t = self.clock()
        # Never on the load's loop: a page costs ~0.2 s of Python per MB.
        if len(body) > PROCESS_PARSE_BYTES:
            return await asyncio.to_thread(self.parse_process.parse, body, shown, t, kind)
        return await asyncio.to_thread(page_parser(kind), body.decode("utf-8", errors="replace"), shown, t)

    async def poll(self, session: aiohttp.ClientSession) -> list[ServerSample]:
        samples = await asyncio.gather(*(self.scrape_once(session, url) for url in self.urls))
        for sample in samples:
            try:
                self.on_sample(sample)
            except Exception:  # a sink's bug must not stop the polling
                log.exception("on_sample failed for %s", sample.url)
        return list(samples)

    async def run(self) -> None:
        """Poll until cancelled."""
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        connector = aiohttp.TCPConnector(limit=max(2, len(self.urls)), ssl=self._ssl)
        try:
            async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
                start = self.clock()
                slot = 0
                while True:
                    await self.poll(session)
                    now = self.clock()
                    slot = max(slot + 1, int((now - start) / self.interval_s) + 1)
                    await asyncio.sleep(max(0.0, start + slot * self.interval_s - now))
        finally:
            self.parse_process.close()
