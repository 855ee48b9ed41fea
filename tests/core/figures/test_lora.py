"""The server's LoRA state as figures: the summary's server.lora, the Stats panel's rows,
the per-second values the knee's rule reads."""

import pytest

from rampwatch.core.figures.lora import (
    LoraSeconds,
    lora_figures,
    lora_now_rows,
    lora_state,
    lora_summary_lines,
)
from rampwatch.core.figures.summary_server import server_figures
from rampwatch.core.timeline import ServerSample


def sample(t, running=None, waiting=None, max_lora=2.0, ok=True, backend="vllm"):
    return ServerSample(
        t=t, url="u", ok=ok, backend=backend, lora_running=running, lora_waiting=waiting, max_lora=max_lora
    )


def test_summary_figures_from_the_scrapes():
    samples = [
        sample(0, ["a"], []),
        sample(1, ["a", "b"], ["c"]),
        sample(2, ["a", "b"], ["c", "d"]),
        sample(3, [], [], max_lora=4.0),
        sample(4, ["x"], ["y"], ok=False),  # a failed scrape says nothing
    ]
    assert lora_figures(samples) == {
        "max_lora": 4.0,
        "max_running_adapters": 2,
        "max_waiting_adapters": 2,
        "waiting_scrapes_pct": 50.0,
        "adapters_waited": ["c", "d"],
    }
    assert server_figures(samples)["lora"]["max_lora"] == 4.0


def test_a_server_without_lora_has_no_lora_figures_nor_lines():
    plain = [ServerSample(t=0, url="u", ok=True, backend="vllm", running=1.0)]
    assert lora_figures(plain) is None
    assert "lora" not in server_figures(plain)
    assert lora_summary_lines(None) == []
    assert lora_state(plain[0]) is None and lora_now_rows(None) == []


def test_summary_lines_cut_long_name_lists():
    lines = lora_summary_lines(
        {
            "max_lora": 2.0,
            "max_running_adapters": 2,
            "max_waiting_adapters": 1,
            "waiting_scrapes_pct": 12.5,
            "adapters_waited": [f"adapter-{i}" for i in range(20)],
        }
    )
    assert lines[0] == f"{'LoRA max_lora (--max-loras):':<40} {'2':<10}"
    assert lines[3].split()[-1] == "12.5"
    assert len(lines[4]) <= 41 + 60 and lines[4].endswith("…")


@pytest.mark.parametrize(
    ("state", "rows"),
    [
        (
            {"running": ["sql", "chat"], "waiting": ["code"], "max_lora": 2.0},
            [("LoRA running", "2/2 sql,chat"), ("LoRA waiting", "1 code")],
        ),
        ({"running": [], "waiting": [], "max_lora": None}, [("LoRA running", "0"), ("LoRA waiting", "0")]),
        (
            {"running": ["a-very-long-adapter-name", "b"], "waiting": [], "max_lora": 4.0},
            [("LoRA running", "2/4 a-very-long-adapter…"), ("LoRA waiting", "0")],
        ),
    ],
)
def test_stats_rows(state, rows):
    assert lora_now_rows(state) == rows


def test_per_second_values_keep_the_newest_scrape_of_each_second_and_are_bounded():
    seconds = LoraSeconds(keep_s=3)
    seconds.add(sample(0.2, ["a"], []))
    seconds.add(sample(0.7, ["a", "b"], ["c"]))
    seconds.add(ServerSample(t=0.9, url="u", ok=True, backend="vllm"))  # no LoRA on the page: ignored
    assert seconds.at(0) == {"lora_running": 2.0, "lora_waiting": 1.0, "max_lora": 2.0}
    assert seconds.at(1) == {}
    for t in (1.5, 2.5, 3.5):
        seconds.add(sample(t, [], []))
    assert seconds.at(0) == {} and seconds.at(3)["lora_running"] == 0.0
    assert seconds.latest is not None and seconds.latest.t == 3.5


def test_an_adapter_both_running_and_waiting_does_not_want_a_slot():
    """vLLM lists an adapter as waiting whenever a request of it waits (a real capture:
    running "sql", waiting "sql"): only adapters not running want a slot."""
    both = sample(0, ["sql"], ["sql", "chat"], max_lora=1.0)
    seconds = LoraSeconds()
    seconds.add(both)
    assert seconds.at(0)["lora_waiting"] == 1.0
    figures = lora_figures([both, sample(1, ["sql"], ["sql"], max_lora=1.0)])
    assert figures is not None
    assert figures["adapters_waited"] == ["chat"] and figures["waiting_scrapes_pct"] == 50.0
    assert figures["max_waiting_adapters"] == 2  # vLLM's own list
