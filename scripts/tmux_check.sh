#!/usr/bin/env bash
# Runs `rampwatch run chat` in tmux against the embedded simulator, as a person would:
#
#   1. at 160x48, fails if the charts are still empty (or the server panels have no
#      /metrics) after WAIT_S (20) seconds (it goes on as soon as they are filled);
#   2. resizes to 80x24 and fails if the tabbed layout shows no chart;
#   3. holds (space) and checks the header says HOLDING, adds a mark (m, note, enter);
#   4. presses ctrl+c and checks it asks for confirmation like q (n keeps the run);
#   5. quits (q), checks the run asked for confirmation, confirms (y) and fails unless
#      rampwatch then exits 130 (stopped before its schedule's end) after printing its
#      summary.
#
# Exits non-zero on any failure; always removes its tmux session and the rampwatch
# process. Nothing is recorded (--no-record). Takes ~35 s. Captures go to $OUT_DIR
# (default: a temporary directory, printed at the end).
#
#   scripts/tmux_check.sh
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
WAIT_S="${WAIT_S:-20}"
OUT_DIR="${OUT_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/rampwatch-tmux-check.XXXXXX")}"
mkdir -p "$OUT_DIR"
command -v tmux >/dev/null || { echo "tmux_check: tmux is not installed" >&2; exit 2; }

session="rampwatch-check-$$"
pidfile="$OUT_DIR/rampwatch.pid"
CHECK_NAME=tmux_check
POLL_S=0.5
. "$REPO/scripts/tmux_lib.sh"

cleanup() {
  [ -s "$pidfile" ] && stop_pid "$(cat "$pidfile")"
  remove_tmux_server
}
trap cleanup EXIT

braille_cells() {  # plotext draws lines with braille cells: a chart with data has some
  "$PY" -c "import sys; print(sum(0x2801 <= ord(c) <= 0x28ff for c in open(sys.argv[1], encoding='utf-8').read()))" "$1"
}

start=$SECONDS
tmuxc -f /dev/null new-session -d -s "$session" -x 160 -y 48 \
  "cd '$REPO' && sh -c 'echo \$\$ > \"$pidfile\"; exec \"$PY\" -m rampwatch.app.cli run chat --no-record --stop-grace 3'; echo EXITED \$?; sleep 600"
tmuxc set-option -t "$session" remain-on-exit on >/dev/null

charts_filled() {  # charts_filled CAPTURE -> 0 when the 160x48 checks below pass, with room
  ! grep -q -e "EXITED" -e "waiting for data" -e "no usable /metrics" "$1" \
    && grep -q "RAMPING" "$1" && [ "$(braille_cells "$1")" -ge 75 ]
}
# Looked at every POLL_S until the charts have filled, at most WAIT_S: the checks are the
# same, and a run whose charts fill in 10 s does not wait out the 20. Filled here is 75
# cells, not the 60 checked: the 80x24 check after it wants 30 of a third of the width.
deadline=$((SECONDS + WAIT_S))
while wide="$(capture live-160x48)" && ! charts_filled "$wide" && [ $SECONDS -lt $deadline ]; do
  sleep "$POLL_S"
done
grep -q "EXITED" "$wide" && fail "rampwatch exited early" "$wide"
cells="$(braille_cells "$wide")"
grep -q "waiting for data" "$wide" && fail "a chart is still waiting for data after ${WAIT_S}s" "$wide"
grep -q "no usable /metrics" "$wide" && fail "server panels have no /metrics from the simulator" "$wide"
[ "$cells" -ge 60 ] || fail "charts nearly empty after ${WAIT_S}s at 160x48 ($cells plotted cells)" "$wide"
grep -q "RAMPING" "$wide" || fail "header does not say RAMPING" "$wide"
echo "tmux_check: 160x48 ok ($cells plotted cells)"

tmuxc resize-window -t "$session" -x 80 -y 24
sleep 2
narrow="$(capture live-80x24)"
cells="$(braille_cells "$narrow")"
[ "$cells" -ge 30 ] || fail "charts nearly empty at 80x24 ($cells plotted cells)" "$narrow"
grep -q "1 Rate" "$narrow" || fail "no tabs at 80x24" "$narrow"
echo "tmux_check: 80x24 ok ($cells plotted cells)"

tmuxc send-keys -t "$session" space
wait_for_text "HOLDING" 5 hold || fail "space did not hold the ramp" "$OUT_DIR/hold.txt"
tmuxc send-keys -t "$session" m
wait_for_text "Mark at" 5 mark-dialog || fail "m did not open the mark dialog" "$OUT_DIR/mark-dialog.txt"
tmuxc send-keys -t "$session" -l "tmux check"
tmuxc send-keys -t "$session" Enter
wait_for_text "M1" 5 marked || fail "the mark is not drawn on the chart" "$OUT_DIR/marked.txt"
echo "tmux_check: hold and mark ok"

tmuxc send-keys -t "$session" C-c
wait_for_text "A run is active" 3 ctrl-c-dialog || fail "ctrl+c did not ask to confirm while the run is active" "$OUT_DIR/ctrl-c-dialog.txt"
tmuxc send-keys -t "$session" n
sleep 1
tmuxc send-keys -t "$session" q
wait_for_text "A run is active" 3 quit-dialog || fail "q did not ask to confirm while the run is active" "$OUT_DIR/quit-dialog.txt"
tmuxc send-keys -t "$session" y
wait_for_text "EXITED" 20 after-quit || fail "rampwatch did not exit within 20 s of quitting" "$OUT_DIR/after-quit.txt"
# The whole scrollback: the summary may be taller than the pane.
after="$(capture_all after-quit-scrollback)"
# Stopped before the end of its schedule: the summary is printed and the exit code is 130.
grep -q "EXITED 130" "$after" || fail "rampwatch did not exit 130 after a stop mid-run" "$after"
grep -q "Request throughput" "$after" || fail "no summary printed after quitting" "$after"
grep -q "Traceback" "$after" && fail "a traceback after quitting" "$after"
echo "tmux_check: quit ok; all checks passed in $((SECONDS - start)) s; captures in $OUT_DIR"
