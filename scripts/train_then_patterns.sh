#!/usr/bin/env bash
# One training run, then its head patterns, summarised on one line (how the default model was chosen;
# README "What the heads learned"). Usage:
#   bash scripts/train_then_patterns.sh NAME SEED [overrides...]
#   bash scripts/train_then_patterns.sh e128_k32 42 embed_dim=128 ff_dim=256 key_dim=32 lr=0.005 dropout=0.3
# prints: NAME sSEED test ACC val ACC ep EPOCHS wall SECONDS | normalised entropy per head | labels
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 seed=$2
shift 2
dir=outputs/heads_search/${name}_s${seed}
mkdir -p outputs/heads_search
start=$(date +%s.%N)
python scripts/train.py seed="$seed" logger.attention.every_n_epochs=0 overwrite=true hydra.run.dir="$dir" "$@" \
  >"$dir.log" 2>&1 || { echo "$name s$seed failed, see $dir.log"; exit 1; }
end=$(date +%s.%N)
python scripts/head_patterns.py "$dir" --json --texts 200 2>/dev/null >"$dir.json"
python - "$name" "$seed" "$dir" "$start" "$end" <<'PY'
import json, sys
name, seed, d, start, end = sys.argv[1:]
m = json.load(open(f"{d}/metrics.json"))
heads = json.load(open(f"{d}.json"))["heads"]
entropy = " ".join(f"{h['normalized_entropy']:.2f}" for h in heads)
labels = ",".join(h["label"] for h in heads)
print(f"{name:24s} s{seed} test {m['test_accuracy']:.4f} val {m['best_val_accuracy']:.4f} ep {m['epochs_run']} "
      f"wall {float(end) - float(start):5.0f}s | {entropy} | {labels}", flush=True)
PY
