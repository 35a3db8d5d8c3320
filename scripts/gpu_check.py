"""The embedded model's train stage on CUDA with NCCL: one rank in this process, then DDP and FSDP2
on every visible GPU (at most 2) through the real launcher (torchrun). Prints each run's losses and
how far its trained weights are from the 1-rank run's, as a share of how far training moved them
(tests/test_ranks.py holds CPU/gloo runs to 1e-3). Run by scripts/gpu_check.sh on a CUDA machine."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "tests" / "rankdriver.py"
sys.path.insert(0, str(DRIVER.parent))
from rankdriver import build_untrained  # noqa: E402


def weights(folder: Path) -> dict:
    return load_file(str(folder / "model" / "model.safetensors"))


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device", file=sys.stderr)
        return 2
    n = min(2, torch.cuda.device_count())
    print(f"gpu_check: {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}, torch {torch.__version__}, "
          f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, {n} rank(s)")
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    build_untrained(work / "start" / "model")
    start = weights(work / "start")
    runs, failed = {}, 0
    for name, ranks, strategy in [("one", 1, "none"), ("ddp", n, "ddp"), ("fsdp", n, "fsdp")]:
        out = work / name
        res = subprocess.run([sys.executable, str(DRIVER), str(work / "start" / "model"), str(out), str(ranks),
                              strategy, "2"], capture_output=True, text=True)
        if res.returncode != 0:
            print(f"{name}: FAILED\n{res.stderr[-3000:]}")
            failed += 1
            continue
        stage = json.loads((out / "stage.json").read_text())
        rows = [json.loads(x) for x in (out / "train.jsonl").read_text().splitlines()]
        runs[name] = out
        print(f"{name}: device {stage.get('device')} ranks {stage.get('ranks', 1)} losses {[r['loss'] for r in rows]}")
    if "one" in runs:
        w1 = weights(runs["one"])
        moved = max(float((w1[k] - start[k]).abs().max()) for k in w1)
        for name in ("ddp", "fsdp"):
            if name in runs:
                wn = weights(runs[name])
                apart = max(float((wn[k] - w1[k]).abs().max()) for k in w1)
                print(f"{name}: max|w - w_one| / max|w_one - w_start| = {apart / moved:.3g}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
