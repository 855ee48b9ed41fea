"""The one redaction: what it masks in text, options and argument lists."""

from __future__ import annotations

import pytest

from rampwatch.core.redact import REDACTED, redact_options, redact_text, scrub, secret_values


@pytest.mark.parametrize(
    "text, expected",
    [
        ("http://user:s3cret-pw@gpu-box:8000/v1", f"http://{REDACTED}@gpu-box:8000/v1"),
        (
            "cannot reach https://alice:p%40ss@[::1]:8443/metrics: refused",
            f"cannot reach https://{REDACTED}@[::1]:8443/metrics: refused",
        ),
        ("http://token-only@host/", f"http://{REDACTED}@host/"),
        ("Authorization: Bearer sk-abcdef123456", f"Authorization: Bearer {REDACTED}"),
        ("basic dXNlcjpwYXNz sent", f"basic {REDACTED} sent"),
        ("http://gpu-box:8000/v1 and mail@example.com", "http://gpu-box:8000/v1 and mail@example.com"),
        ("http://host/path?next=a@b", "http://host/path?next=a@b"),
    ],
)
def test_redact_text(text, expected):
    assert redact_text(text) == expected


def test_options_lose_url_credentials_and_the_password_is_scrubbed_elsewhere():
    options = {
        "target": "http://admin:hunter2-long@gpu-box:8000",
        "metrics_url": ["http://admin:hunter2-long@gpu-box:8000/metrics"],
        "api_key": "sk-live-1234567890",
        "argv": ["--api-key", "sk-live-1234567890", "--target", "x"],
    }
    clean = redact_options(options)
    assert clean["target"] == f"http://{REDACTED}@gpu-box:8000"
    assert clean["metrics_url"] == [f"http://{REDACTED}@gpu-box:8000/metrics"]
    assert clean["api_key"] == REDACTED and clean["argv"][1] == REDACTED
    secrets = secret_values(options)
    assert {"hunter2-long", "sk-live-1234567890"} <= secrets
    echoed = "upstream said: login admin:hunter2-long refused for sk-live-1234567890"
    assert "hunter2-long" not in scrub(echoed, secrets) and "sk-live-1234567890" not in scrub(echoed, secrets)


@pytest.mark.parametrize(
    ("text", "secrets", "expected"),
    [
        # a placeholder key or a short header value is not searched for in text
        ("model tiny, vllm served it", {"vllm", "i", "EMPTY"}, "model tiny, vllm served it"),
        ("-1e5", {"e"}, "-1e5"),
        # a real one is, wherever it is, the longest first where two overlap
        ("Bearer sk-live-123456789 in the log", {"sk-live-123456789"}, "Bearer <redacted> in the log"),
        ("abcdefgh-12345678", {"abcdefgh", "abcdefgh-12345678"}, "<redacted>"),
        # a secret that spells part of the mask does not mask inside the mask
        ("key redacted1 and redacted1", {"redacted1"}, "key <redacted> and <redacted>"),
    ],
)
def test_scrub_masks_given_values_of_a_secrets_length_only(text, secrets, expected):
    from rampwatch.core.redact import scrub

    assert scrub(text, secrets) == expected
