#!/usr/bin/env bash
# Screenshot an HTML report with headless Chromium (Debian package `chromium`).
#   scripts/html_screenshot.sh REPORT.html OUT.png
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 REPORT.html OUT.png" >&2
    exit 2
fi
report=$(realpath "$1")
out=$(realpath -m "$2")
browser=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$browser" ]; then
    echo "$0: chromium not found (apt-get install -y chromium)" >&2
    exit 2
fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --screenshot="$out" --window-size=1400,2000 \
    "file://$report" >/dev/null 2>&1
test -s "$out"
