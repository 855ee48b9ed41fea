"""Scenario files that would exhaust memory or the stack are refused with one line naming
the file and line, before anything expands them."""

from __future__ import annotations

import pytest

from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.loadgen.workload.scenario_files import MAX_EXPANDED_NODES

BILLION_LAUGHS = """\
name: laughs
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""

SELF_REFERENCE = """\
name: loop
workload: &w
  inner: *w
"""


def test_alias_expansion_past_the_limit_is_refused(tmp_path):
    path = tmp_path / "laughs.yaml"
    path.write_text(BILLION_LAUGHS)
    with pytest.raises(UserError) as info:
        load_scenario(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}:") and f"{MAX_EXPANDED_NODES:,}" in message
    assert "\n" not in message


def test_an_anchor_that_refers_to_itself_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text(SELF_REFERENCE)
    with pytest.raises(UserError, match=r"loop\.yaml:\d+: a YAML anchor refers to itself"):
        load_scenario(str(path))


def test_aliases_within_the_limit_still_load(tmp_path):
    """Anchors that reuse a block are fine: only expansion past the limit is refused."""
    path = tmp_path / "reuse.yaml"
    path.write_text(
        "name: reuse\n"
        "schedule: {kind: linear, start_rps: &rate 2, end_rps: *rate, duration_s: 5}\n"
        "workload: {input_tokens: &len 32, output_tokens: *len}\n"
    )
    scenario = load_scenario(str(path))
    assert scenario.schedule_spec["start_rps"] == scenario.schedule_spec["end_rps"] == 2
    assert scenario.workload["output_tokens"] == {"dist": "fixed", "value": 32}
