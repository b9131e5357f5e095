"""Time the test suite's tiers as multiples of one `python -c "import tensorflow, keras"` on this machine.

    python scripts/suite_speed.py                 # the fast and middle tiers
    python scripts/suite_speed.py --tiers full    # the whole suite (about ten minutes on 2 cores)

The machine's speed moves by up to 2x from one minute to the next, so seconds measured on different days say
little; a ratio to a TensorFlow import timed around each tier, in the same process, does. Each tier runs once,
between two rounds of imports (three each); the JSON printed gives every time, the median import and the
ratios, and the CPU (AVX-512 BF16 or not) they were measured on.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIERS = {
    "fast": ["-m", "not slow"],
    "middle": ["-m", "not slow or core"],
    "full": [],
}


def seconds(command: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, done.returncode


def imports(rounds: int = 3) -> list[float]:
    return [round(seconds([sys.executable, "-c", "import tensorflow, keras"])[0], 2) for _ in range(rounds)]


def cpu() -> str:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    return f"{model}; {info.count('avx512_bf16')} cores with avx512_bf16"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiers", default="fast,middle", help="comma-separated: fast, middle, full")
    args = parser.parse_args()
    tiers = args.tiers.split(",")
    unknown = [t for t in tiers if t not in TIERS]
    if unknown:
        print(f"error: --tiers={args.tiers} is invalid: each must be one of {', '.join(TIERS)}", file=sys.stderr)
        raise SystemExit(2)
    result = {"cpu": cpu(), "date": time.strftime("%Y-%m-%d %H:%M"), "import_seconds": imports(), "tiers": {}}
    # Set, it keeps pytest from caching the test modules it rewrites: each worker rewrites them again on every run.
    result["PYTHONDONTWRITEBYTECODE"] = os.environ.get("PYTHONDONTWRITEBYTECODE", "")
    for tier in tiers:
        took, code = seconds([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TIERS[tier]])
        after = imports()
        result["import_seconds"] += after
        result["tiers"][tier] = {"seconds": round(took, 1), "pytest_exit": code}
    unit = statistics.median(result["import_seconds"])
    result["import_median"] = round(unit, 2)
    for numbers in result["tiers"].values():
        numbers["times_an_import"] = round(numbers["seconds"] / unit, 1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
