#!/usr/bin/env bash
# Regenerate the README's pictures (docs/*.png) from real runs, on this machine (about 10 minutes on 2 cores):
#   bash scripts/readme_pictures.sh [WORK_DIR]        # WORK_DIR default: outputs/readme_pictures
# 1. docs/attention_grid.png   the default run (seed 42) on one sentence, inspect_attention.py
# 2. docs/head_view.png        that run's attention.html in headless Chromium, one head, a query hovered
# 3. docs/hparams_table.png    TensorBoard's HParams table of a 4-job sweep that learns (heads x key_dim)
# 4. docs/tensorboard_compare.png     the Attention tab on data=relations (task marker), compare: heads=1 beside
#                                     heads=4, every head of the four overlaid
# Needs chromium (apt-get install chromium) and Playwright (the dev extra).
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-outputs/readme_pictures}
run=$work/default_seed42
sweep=$work/sweep_heads_key_dim
sentence="The coffee was stale and bitter, but the tea is wonderful."

python scripts/train.py seed=42 hydra.run.dir="$run" | tail -n 1
python scripts/inspect_attention.py "$run" "$sentence" --out docs/attention_grid.png | tail -n 1

# The first probe, head 0, a query hovered: the head view as it opens, one head at a time.
bash scripts/head_view_screenshot.sh "$run" docs/head_view.png "text=0&layer=0&head=0&hover=q3"

python scripts/train.py -m heads=1,4 key_dim=8,32 head_view.html=false hydra.sweep.dir="$sweep" | tail -n 2
port=$(python -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
python -m tensorboard.main --logdir "$sweep" --host 127.0.0.1 --port "$port" >/dev/null 2>&1 &
board=$!
trap 'kill $board' EXIT
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$port/data/plugins_listing" >/dev/null && break; sleep 1; done
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome)
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1900,520 \
  --virtual-time-budget=20000 --screenshot="$(realpath docs/hparams_table.png)" \
  "http://127.0.0.1:$port/#hparams" 2>/dev/null
kill $board

relations=$work/relations_heads_1_4
python scripts/train.py -m data=relations heads=1,4 head_view.html=false hydra.sweep.dir="$relations" | tail -n 2
python -m tensorboard.main --logdir "$relations" --host 127.0.0.1 --port "$port" >/dev/null 2>&1 &
board=$!
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$port/data/plugins_listing" >/dev/null && break; sleep 1; done
python scripts/tab_screenshot.py "http://127.0.0.1:$port" docs/tensorboard_compare.png "run=0&compare_run=1" all
echo "wrote docs/attention_grid.png docs/head_view.png docs/hparams_table.png docs/tensorboard_compare.png"
