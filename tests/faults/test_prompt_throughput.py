"""vLLM's "Avg prompt throughput" counts the prompt tokens the server computed (prefix-cache
hits excluded); rampwatch shows that figure under vLLM's label and all prompt tokens
beside it, each named for what it is."""

from __future__ import annotations

from pathlib import Path

from rampwatch.core.figures.summary import format_summary, server_figures, summarise_requests
from rampwatch.loadgen.server.scrape import parse_metrics

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "vllm-0.32.0-cpu"


def test_the_computed_count_is_read_from_the_real_capture():
    sample = parse_metrics((CAPTURES / "metrics.txt").read_text(), "u", 0.0)
    assert sample.prompt_tokens_total == 50049
    assert sample.prompt_tokens_computed_total == 32513  # source="local_compute"
    assert sample.prompt_tokens_total - sample.prompt_tokens_computed_total == sample.prefix_hits_total


def scrape(t: float, prompt: float, computed: float | None):
    lines = [
        f'vllm:prompt_tokens_total{{engine="0",model_name="m"}} {prompt}',
        'vllm:generation_tokens_total{engine="0",model_name="m"} 0',
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0',
    ]
    if computed is not None:
        lines.append(
            f'vllm:prompt_tokens_by_source_total{{engine="0",model_name="m",source="local_compute"}} {computed}'
        )
        lines.append(
            f'vllm:prompt_tokens_by_source_total{{engine="0",model_name="m",source="local_cache_hit"}} '
            f"{prompt - computed}"
        )
    return parse_metrics("\n".join(lines) + "\n", "u", t)


def test_vllms_label_gets_the_computed_tokens_and_all_prompt_tokens_stand_beside_it():
    figures = server_figures([scrape(0.0, 0, 0), scrape(10.0, 16000, 5800)])
    assert figures["avg_prompt_throughput"] == 580.0
    assert figures["avg_prompt_throughput_all"] == 1600.0
    text = format_summary(summarise_requests(None, [], [scrape(0.0, 0, 0), scrape(10.0, 16000, 5800)], []))
    assert "Avg prompt throughput (tok/s):           580.00" in text
    assert "Prompt incl. cache hits (tok/s):         1600.00" in text


def test_a_server_without_the_computed_count_gives_all_prompt_tokens():
    figures = server_figures([scrape(0.0, 0, None), scrape(10.0, 16000, None)])
    assert figures["avg_prompt_throughput"] == figures["avg_prompt_throughput_all"] == 1600.0
