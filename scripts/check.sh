#!/usr/bin/env bash
# Lint and type checks, as CI runs them: ruff check, ruff format --check, mypy.
# Settings live in pyproject.toml. Tools come from the dev extra:
#   python -m pip install -e '.[test,dev]'
# PY selects the interpreter (default .venv/bin/python). Runs every check, then exits
# non-zero if any failed, naming each failed check.
set -u

cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"

# mypy cannot follow the package-dir mapping (core/ -> rampwatch.core, ...) through the
# editable install's import hook, so it reads the packages from a tree of links under
# build/ (pyproject.toml: tool.mypy.mypy_path).
link_tree() {
    local root=build/mypy-path/rampwatch pkg
    mkdir -p "$root" || return 1
    for pkg in core loadgen sim record tui app scenarios; do
        ln -sfn "../../../$pkg" "$root/$pkg" || return 1
    done
}

failed=()
run() {
    local name=$1
    shift
    echo "== $name"
    if ! "$@"; then
        failed+=("$name")
    fi
}

run "ruff check" "$PY" -m ruff check .
run "ruff format --check" "$PY" -m ruff format --check .
if link_tree; then
    # Error paths through the link tree are shown as the repository's own paths.
    run "mypy" bash -o pipefail -c '"$1" -m mypy | sed "s|^build/mypy-path/rampwatch/||"' _ "$PY"
else
    failed+=("mypy (could not build the link tree under build/mypy-path)")
fi

if ((${#failed[@]})); then
    echo
    for name in "${failed[@]}"; do
        echo "FAILED: $name" >&2
    done
    exit 1
fi
echo
echo "all checks passed"
