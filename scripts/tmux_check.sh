#!/usr/bin/env bash
# Runs `rampwatch run` in tmux against the embedded simulator, as a person would, and
# fails if the charts are still empty after 20 s. Leaves the last capture in
# $OUT_DIR (default: ./tmux-check) for CI artefacts and docs/live-screen.txt.
#
#   scripts/tmux_check.sh [WIDTHxHEIGHT ...]     (default: 160x48 80x24)
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
OUT_DIR="${OUT_DIR:-$REPO/tmux-check}"
WAIT_S="${WAIT_S:-20}"
SIZES=("$@")
[ ${#SIZES[@]} -eq 0 ] && SIZES=(160x48 80x24)
mkdir -p "$OUT_DIR"
command -v tmux >/dev/null || { echo "tmux_check: tmux is not installed" >&2; exit 2; }

status=0
for size in "${SIZES[@]}"; do
  cols="${size%x*}"; rows="${size#*x}"
  session="rampwatch-check-$$-$size"
  capture="$OUT_DIR/live-$size.txt"
  tmux new-session -d -s "$session" -x "$cols" -y "$rows" \
    "cd '$REPO' && '$PY' -m tui.cli run chat --duration 40 --no-record; echo EXITED \$?; sleep 60"
  sleep "$WAIT_S"
  tmux capture-pane -p -t "$session" > "$capture"
  # Braille cells are what plotext draws lines with: a chart with data has some.
  plotted=$("$PY" -c "import sys; print(sum(0x2801 <= ord(c) <= 0x28ff for c in open(sys.argv[1], encoding='utf-8').read()))" "$capture")
  if grep -q "EXITED" "$capture"; then
    echo "tmux_check $size: rampwatch exited early:" >&2
    cat "$capture" >&2
    status=1
  elif [ "$plotted" -lt 20 ] || grep -q "waiting for data" "$capture"; then
    echo "tmux_check $size: charts empty after ${WAIT_S}s ($plotted plotted cells)" >&2
    cat "$capture" >&2
    status=1
  else
    echo "tmux_check $size: ok ($plotted plotted cells) -> $capture"
  fi
  # Steer like a user: hold, mark, then stop and quit.
  tmux send-keys -t "$session" space; sleep 1
  tmux send-keys -t "$session" m; sleep 0.5
  tmux send-keys -t "$session" "tmux check" Enter; sleep 1
  tmux send-keys -t "$session" q; sleep 0.5
  tmux send-keys -t "$session" y; sleep 8
  tmux capture-pane -p -t "$session" > "$OUT_DIR/after-quit-$size.txt"
  tmux kill-session -t "$session" 2>/dev/null || true
  sleep 1  # let a last-session tmux server exit before the next one starts
done
exit $status
