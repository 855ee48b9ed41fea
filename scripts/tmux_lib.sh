# Helpers shared by the tmux checks (scripts/tmux_check.sh, scripts/tmux_failure_check.sh):
# sourced, not run. The caller sets CHECK_NAME (its messages' prefix), session (the name of
# its private tmux server and session) and OUT_DIR (where captures go); POLL_S is how often
# wait_for_text looks at the pane (default 0.2 s).

tmuxc() { tmux -L "$session" "$@"; }  # a private tmux server: the user's sessions are untouched

stop_pid() {  # stop_pid PID: TERM, up to 5 s, then KILL
  local pid="$1"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -KILL "$pid" 2>/dev/null || true
}

remove_tmux_server() {
  tmuxc kill-server 2>/dev/null || true
  rm -f "${TMUX_TMPDIR:-/tmp}/tmux-$(id -u)/$session"
}

fail() {  # fail MESSAGE [FILE]: says why (and shows FILE, e.g. a capture), exits 1
  echo "$CHECK_NAME: FAIL: $1" >&2
  [ -n "${2:-}" ] && [ -f "$2" ] && cat "$2" >&2
  exit 1
}

capture() {  # capture NAME -> path of the pane's text
  local path="$OUT_DIR/$1.txt"
  tmuxc capture-pane -p -t "$session" > "$path"
  echo "$path"
}

capture_all() {  # capture_all NAME -> path of the pane's text with its whole scrollback
  local path="$OUT_DIR/$1.txt"
  tmuxc capture-pane -p -S - -t "$session" > "$path"
  echo "$path"
}

wait_for_text() {  # wait_for_text TEXT SECONDS NAME -> 0 when the pane shows TEXT
  local deadline=$((SECONDS + $2)) path
  while [ $SECONDS -le $deadline ]; do
    path="$(capture "$3")"
    grep -qF -- "$1" "$path" && return 0
    sleep "${POLL_S:-0.2}"
  done
  return 1
}
