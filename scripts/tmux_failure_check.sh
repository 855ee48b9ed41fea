#!/usr/bin/env bash
# Kills the server under a live run and checks the screen says so, as a person would see it:
#
#   1. starts a standalone simulator (`rampwatch sim`) and `rampwatch run chat --target` it
#      in tmux at 160x48; waits until the header says OK and the charts have data;
#   2. kills the simulator (SIGKILL) and fails unless, within DEADLINE_S (3) seconds, the
#      header says SERVER DOWN and the Rate chart's legend names the connection errors
#      (its error series are in the legend only once they have data);
#   3. fails if the events panel shows more than one line for the refused /metrics scrapes
#      (one line per distinct failure, with its count), or if enter does not open it whole;
#   4. quits (q, y) and fails unless rampwatch exits with its summary and no traceback.
#
# Exits non-zero on any failure; always removes its tmux server, the simulator and the
# rampwatch process. Nothing is recorded (--no-record). Takes ~25 s. Captures go to
# $OUT_DIR (default: a temporary directory, printed at the end).
#
#   scripts/tmux_failure_check.sh
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
DEADLINE_S="${DEADLINE_S:-3}"
OUT_DIR="${OUT_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/rampwatch-failure-check.XXXXXX")}"
mkdir -p "$OUT_DIR"
command -v tmux >/dev/null || { echo "tmux_failure_check: tmux is not installed" >&2; exit 2; }

session="rampwatch-fail-check-$$"
pidfile="$OUT_DIR/rampwatch.pid"
sim_pid=""
CHECK_NAME=tmux_failure_check
. "$REPO/scripts/tmux_lib.sh"

cleanup() {
  [ -s "$pidfile" ] && stop_pid "$(cat "$pidfile")"
  stop_pid "$sim_pid"
  remove_tmux_server
}
trap cleanup EXIT

start=$SECONDS
port="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$PY" -m rampwatch.app.cli sim --port "$port" --model tiny --hardware h100 > "$OUT_DIR/sim.log" 2>&1 &
sim_pid=$!
"$PY" - "$port" <<'EOF' || fail "the simulator did not answer within 20 s" "$OUT_DIR/sim.log"
import sys, time, urllib.request
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v1/models", timeout=1).read()
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
EOF

tmuxc -f /dev/null new-session -d -s "$session" -x 160 -y 48 \
  "cd '$REPO' && sh -c 'echo \$\$ > \"$pidfile\"; exec \"$PY\" -m rampwatch.app.cli run chat --target http://127.0.0.1:$port --set schedule.start_rps=6 --set schedule.end_rps=8 --no-record --stop-grace 2'; echo EXITED \$?; sleep 600"
tmuxc set-option -t "$session" remain-on-exit on >/dev/null
tmuxc set-option -s escape-time 0 >/dev/null  # an Escape is not held back to pair with the next key

wait_for_text " OK " 20 before-kill || fail "the header never said OK" "$OUT_DIR/before-kill.txt"
sleep 4  # a few seconds of traffic before the server dies
before="$(capture before-kill)"
grep -q "EXITED" "$before" && fail "rampwatch exited early" "$before"
grep -q " OK " "$before" || fail "the header does not say OK before the kill" "$before"
echo "tmux_failure_check: running, header OK"

kill -KILL "$sim_pid"
killed_at=$(date +%s.%N)
wait "$sim_pid" 2>/dev/null || true  # reaped here, so bash does not report the kill
deadline=$((SECONDS + DEADLINE_S + 1))
down="" errors=""
while [ $SECONDS -le $deadline ]; do
  path="$(capture after-kill)"
  elapsed="$("$PY" -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$killed_at")"
  [ -z "$down" ] && grep -q "SERVER DOWN" "$path" && down="$elapsed"
  [ -z "$errors" ] && grep -q "conn err" "$path" && errors="$elapsed"
  [ -n "$down" ] && [ -n "$errors" ] && break
  sleep 0.2
done
[ -n "$down" ] || fail "the header does not say SERVER DOWN ${DEADLINE_S} s after the kill" "$path"
[ -n "$errors" ] || fail "no connection-error series on the Rate chart ${DEADLINE_S} s after the kill" "$path"
late="$("$PY" -c "import sys; print(int(max(float(sys.argv[1]), float(sys.argv[2])) > float(sys.argv[3])))" "$down" "$errors" "$DEADLINE_S")"
[ "$late" = 0 ] || fail "SERVER DOWN after ${down} s, errors after ${errors} s (limit ${DEADLINE_S} s)" "$path"
echo "tmux_failure_check: SERVER DOWN after ${down} s, connection errors drawn after ${errors} s"

sleep 3  # a few more failed scrapes: still one line
path="$(capture events)"
refused="$(grep -c "connection refused" "$path" || true)"
[ "$refused" -eq 1 ] || fail "the refused /metrics scrapes take $refused lines of the events panel, not 1" "$path"
grep -qE "connection refused ×[0-9]+" "$path" || fail "the refused scrapes' line has no repeat count" "$path"
echo "tmux_failure_check: one events line for the refused scrapes"

tmuxc send-keys -t "$session" Enter  # the newest event, selected: shown whole
wait_for_text "failed scrapes:" 3 event-detail || fail "enter did not show the selected event whole" "$OUT_DIR/event-detail.txt"
tmuxc send-keys -t "$session" Escape
# (the next key waits for it to close: ESC and a key right after it read as alt+key)
for _ in $(seq 15); do grep -qF "failed scrapes:" "$(capture event-closed)" || break; sleep 0.2; done
grep -qF "failed scrapes:" "$OUT_DIR/event-closed.txt" && fail "escape did not close the event" "$OUT_DIR/event-closed.txt"
echo "tmux_failure_check: enter shows the event whole, escape closes it"

tmuxc send-keys -t "$session" q
wait_for_text "A run is active" 3 quit-dialog || fail "q did not ask to confirm" "$OUT_DIR/quit-dialog.txt"
tmuxc send-keys -t "$session" y
wait_for_text "EXITED" 20 after-quit || fail "rampwatch did not exit within 20 s of quitting" "$OUT_DIR/after-quit.txt"
# The whole scrollback: the summary is taller than the pane (48 lines), so its first lines
# have scrolled out of the visible screen by the time the process exits.
after="$(capture_all after-quit-scrollback)"
grep -q "Traceback" "$after" && fail "a traceback after quitting" "$after"
grep -q "Request throughput" "$after" || fail "no summary printed after quitting" "$after"
echo "tmux_failure_check: quit ok ($(grep -o 'EXITED [0-9]*' "$after")); all checks passed in $((SECONDS - start)) s; captures in $OUT_DIR"
