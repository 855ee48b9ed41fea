"""Numeric flags of `rampwatch run` that would stop scraping, busy-loop or make no sense
are refused before anything starts: exit 2 and one error line naming the flag."""

from __future__ import annotations

import argparse

import pytest

from rampwatch.app import run
from rampwatch.app.run_config import DEFAULT_METRICS_MAX_BYTES


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rampwatch run")
    run.configure(parser)
    return parser.parse_args(["chat", *argv])


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--scrape-interval", "0"),
        ("--scrape-interval", "-1"),
        ("--progress-interval", "0"),
        ("--request-timeout", "0"),
        ("--request-timeout", "nan"),
        ("--max-error-rate", "1.5"),
        ("--max-error-rate", "-0.1"),
        ("--stop-grace", "-1"),
        ("--duration", "0"),
        ("--duration", "inf"),
        ("--max-concurrency", "0"),
        ("--max-concurrency", "2.5"),
        ("--workers", "0"),
        ("--rate-step", "0"),
        ("--start-rps", "-1"),
        ("--gpu-price-per-hour", "abc"),
        ("--metrics-max-bytes", "0"),
    ],
)
def test_a_bad_number_is_one_line_naming_the_flag(capsys, flag, value):
    with pytest.raises(SystemExit) as exit_info:
        parse(flag, value)
    assert exit_info.value.code == 2
    error_lines = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(error_lines) == 1
    assert f"argument {flag}: {value!r} is not" in error_lines[0]


@pytest.mark.parametrize(
    "flag, value, expected",
    [
        ("--scrape-interval", "0.5", 0.5),
        ("--max-error-rate", "0", 0.0),
        ("--max-error-rate", "1", 1.0),
        ("--stop-grace", "0", 0.0),
        ("--max-concurrency", "256", 256),
        ("--start-rps", "0", 0.0),
    ],
)
def test_good_numbers_pass(flag, value, expected):
    args = parse(flag, value)
    assert getattr(args, flag.lstrip("-").replace("-", "_")) == expected


def test_the_metrics_cap_default_is_the_scrapers():
    from rampwatch.loadgen.server.scrape import DEFAULT_MAX_BODY_BYTES

    assert parse().metrics_max_bytes == DEFAULT_METRICS_MAX_BYTES == DEFAULT_MAX_BODY_BYTES
    assert parse("--metrics-max-bytes", "1000").metrics_max_bytes == 1000
