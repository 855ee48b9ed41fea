"""--cache-salt: the run's prefix-cache policy, and vLLM's rule for a valid salt."""

import pytest

from rampwatch.core.cache_salt import (
    AUTO,
    FIXED,
    NONE,
    cache_salt_choice,
    cache_salt_problem,
    describe_cache_policy,
)
from rampwatch.core.errors import UserError


def test_auto_draws_a_fresh_valid_salt_for_each_run():
    salts = {cache_salt_choice("auto") for _ in range(50)}
    assert len(salts) == 50
    assert all(policy == AUTO and cache_salt_problem(salt) is None for policy, salt in salts)


@pytest.mark.parametrize(
    "value, expected",
    [("none", (NONE, None)), ("bench-a", (FIXED, "bench-a")), ("x" * 128, (FIXED, "x" * 128))],
)
def test_none_sends_no_salt_and_any_other_text_is_the_salt(value, expected):
    assert cache_salt_choice(value) == expected


@pytest.mark.parametrize("value", ["", "a/b", "a@b", "back\\slash", "nul\x00", "x" * 129])
def test_a_salt_vllm_would_refuse_is_one_line_naming_the_flag(value):
    with pytest.raises(UserError) as err:
        cache_salt_choice(value)
    message = str(err.value)
    assert message.startswith("--cache-salt ") and "\n" not in message
    assert cache_salt_problem(value) is not None


@pytest.mark.parametrize("value", ["a\x1b[31mred\x07", "two\nlines", "tab\there", "bidi\u202eevil"])
def test_a_salt_with_control_characters_is_refused_without_reaching_the_terminal(value):
    """vLLM would take it, but banners, reports and comparisons show the salt."""
    with pytest.raises(UserError) as err:
        cache_salt_choice(value)
    message = str(err.value)
    assert message.startswith("--cache-salt ") and message.isprintable()


def test_a_long_refused_salt_is_not_repeated_whole():
    with pytest.raises(UserError) as err:
        cache_salt_choice("@" * 5000)
    assert len(str(err.value)) < 300


@pytest.mark.parametrize(
    "policy, salt, words",
    [
        (AUTO, "rampwatch-1", ["rampwatch-1", "fresh"]),
        (FIXED, "bench-a", ["bench-a", "given"]),
        (NONE, None, ["no cache salt"]),
        (None, None, ["unknown"]),
    ],
)
def test_each_policy_reads_as_what_it_does(policy, salt, words):
    text = describe_cache_policy(policy, salt)
    assert all(word in text for word in words)
