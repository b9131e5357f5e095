#!/usr/bin/env bash
# A PNG of a run's attention.html as headless Chromium draws it (the README's picture):
#   bash scripts/head_view_screenshot.sh RUN_DIR OUT.png [VIEW]
# VIEW is the page's address fragment, e.g. "text=1&layer=0&head=2&hover=q4" (head=all: every head;
# default: text 0, head 0, hover query 3).
set -euo pipefail
run_dir=$1; out=$2; view=${3:-"text=0&layer=0&head=0&hover=q3"}
page="$(cd "$run_dir" && pwd)/attention.html"
[ -f "$page" ] || { echo "error: $page not found (runs write it when head_view.html=true)" >&2; exit 2; }
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome) \
  || { echo "error: no chromium on PATH (apt-get install chromium)" >&2; exit 2; }
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,900 \
  --screenshot="$(realpath -m "$out")" "file://$page#$view" 2>/dev/null
echo "wrote $out"
