"""vLLM's vllm:lora_requests_info read into a sample: the newest series wins, the names
are bounded and printable, a page without it gives nothing."""

import pytest

from rampwatch.loadgen.server.lora_info import MAX_NAME_CHARS, MAX_NAMES, adapter_names, lora_fields
from rampwatch.loadgen.server.scrape import parse_metrics

# The lines vLLM 0.32 writes (labels in its order), an older state lingering below the newest.
PAGE = """\
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",waiting_lora_adapters="",running_lora_adapters="sql"} 1.7000000001e+09
vllm:lora_requests_info{max_lora="2",waiting_lora_adapters="code",running_lora_adapters="sql,chat"} 1.7000000005e+09
vllm:lora_requests_info{max_lora="2",waiting_lora_adapters="",running_lora_adapters=""} 1.7000000003e+09
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
"""


def test_the_newest_series_is_the_state_and_none_is_kept_raw():
    sample = parse_metrics(PAGE, "http://x/metrics", 1.0)
    assert (sample.lora_running, sample.lora_waiting, sample.max_lora) == (["sql", "chat"], ["code"], 2.0)
    assert sample.running == 3.0
    assert not any("lora" in key for key in sample.raw)


def test_a_page_without_lora_leaves_the_fields_unset():
    sample = parse_metrics(
        PAGE.split("# TYPE vllm:num")[0].replace("vllm:lora", "x") + "vllm:num_requests_running 1\n", "u", 0
    )
    assert (sample.lora_running, sample.lora_waiting, sample.max_lora) == (None, None, None)


def test_hostile_names_are_printable_and_bounded():
    names = ",".join(["\x1b[31mred"] + [f"a{i}" * 80 for i in range(100)])
    page = f'vllm:lora_requests_info{{max_lora="x",running_lora_adapters="{names}",waiting_lora_adapters=""}} 5\n'
    sample = parse_metrics("# TYPE vllm:lora_requests_info gauge\n" + page, "u", 0)
    assert sample.lora_running is not None and len(sample.lora_running) == MAX_NAMES
    assert all(name.isprintable() and len(name) <= MAX_NAME_CHARS for name in sample.lora_running)
    assert "\x1b" not in sample.lora_running[0]
    assert sample.max_lora is None  # not a count: not a number made up


@pytest.mark.parametrize("max_lora", ["1e308", "2.5", "-1", "nan", "inf", "4294967296"])
def test_a_max_lora_that_is_not_a_slot_count_is_unread(max_lora):
    # 1e308 was read and the summary showed a 309-digit max_lora
    labels = {"max_lora": max_lora, "running_lora_adapters": "a", "waiting_lora_adapters": ""}
    assert lora_fields([("vllm:lora_requests_info", labels, 5.0)])["max_lora"] is None
    assert lora_fields([("vllm:lora_requests_info", {**labels, "max_lora": "4"}, 5.0)])["max_lora"] == 4.0


@pytest.mark.parametrize(
    ("label", "expected"), [(None, []), ("", []), ("a", ["a"]), ("a,,b", ["a", "b"]), (" a , b", ["a", "b"])]
)
def test_adapter_names(label, expected):
    assert adapter_names(label) == expected


def test_on_a_tie_the_last_series_on_the_page_wins():
    a = {"max_lora": "1", "running_lora_adapters": "a", "waiting_lora_adapters": ""}
    b = {"max_lora": "1", "running_lora_adapters": "b", "waiting_lora_adapters": ""}
    name = "vllm:lora_requests_info"
    assert lora_fields([(name, a, 5.0), (name, b, 5.0)])["lora_running"] == ["b"]
    assert lora_fields([]) == {}


# vLLM 0.32 CPU, --max-loras 1, two adapters, after one request to each: the states in the
# order the page gave them; the newest (second) is the idle one.
REAL = """\
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="1",running_lora_adapters="sql",waiting_lora_adapters="sql"} 1.7957800240513053e+09
vllm:lora_requests_info{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""} 1.795780024124759e+09
vllm:lora_requests_info{max_lora="1",running_lora_adapters="chat",waiting_lora_adapters="chat"} 1.7957800240972927e+09
"""


def test_a_real_vllm_page_reads_its_newest_state():
    sample = parse_metrics(REAL, "u", 0.0)
    assert (sample.lora_running, sample.lora_waiting, sample.max_lora) == ([], [], 1.0)
