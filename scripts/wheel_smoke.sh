#!/usr/bin/env bash
# Builds rampwatch's wheel, installs it into a fresh venv and runs it from an unrelated
# directory: the wheel alone must carry its scenarios and styles, and install nothing
# generic at top level (only the `rampwatch` namespace).
#
#   PY   the python that builds the wheel (default: python3)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
py=${PY:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "wheel smoke: $*" >&2; exit 1; }

"$py" -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" "$repo" >"$work/pip.log" 2>&1 \
  || { cat "$work/pip.log" >&2; fail "building the wheel failed"; }
wheel=$(ls "$work"/dist/rampwatch-*.whl)
echo "wheel smoke: built $(basename "$wheel")"
# The listing is read whole first: `unzip | grep -q` under pipefail fails whenever grep
# exits before unzip has written everything.
listing=$(unzip -Z1 "$wheel")
tops=$(echo "$listing" | cut -d/ -f1 | sort -u | grep -v '\.dist-info$' || true)
[ "$tops" = "rampwatch" ] || fail "the wheel installs top-level names other than rampwatch: $(echo $tops)"
for file in rampwatch/scenarios/chat.yaml rampwatch/tui/rampwatch.tcss; do
  grep -qx "$file" <<<"$listing" || fail "the wheel lacks $file"
done

"$py" -m venv "$work/venv"
# --no-compile: byte-compiling every dependency at install took 12 s of its 28 here; the run
# below compiles what it imports (3 s), and a compile error never failed an install anyway.
"$work/venv/bin/pip" install --quiet --no-compile "$wheel" >"$work/pip.log" 2>&1 \
  || { cat "$work/pip.log" >&2; fail "installing the wheel failed"; }
mkdir "$work/elsewhere"
cd "$work/elsewhere"
if "$work/venv/bin/python" -c "import tui" 2>/dev/null; then
  fail "'import tui' works in the wheel's venv: a generic top-level package was installed"
fi
"$work/venv/bin/rampwatch" sim --help >/dev/null || fail "rampwatch sim --help failed"
# --drain cap:5: the shipped chat scenario waits up to 30 s for its last requests after the
# schedule (its drain: cap:30); what this checks comes from the 10 s before, so 5 s do.
"$work/venv/bin/rampwatch" run chat --headless --duration 10 --drain cap:5 --result-json "$work/result.json" \
  > "$work/run.log" 2>&1 || { cat "$work/run.log" >&2; fail "rampwatch run chat --headless --duration 10 --drain cap:5 failed"; }
grep -q "Successful requests" "$work/run.log" || { cat "$work/run.log" >&2; fail "no summary printed"; }
ls "$work"/elsewhere/recordings/*.rwrec >/dev/null 2>&1 || fail "no recording under ./recordings"
"$work/venv/bin/python" -c "import json, sys; r = json.load(open(sys.argv[1])); assert r['completed'] > 0, r['completed']" \
  "$work/result.json" || fail "the result JSON has no completed request"
echo "wheel smoke: passed (rampwatch run chat from $(basename "$wheel") in a fresh venv, outside the checkout)"
