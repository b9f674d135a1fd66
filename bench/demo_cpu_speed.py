"""The bundled demo model on this machine's CPU: seconds per generated kernel, and per 600 tokens.

    python bench/demo_cpu_speed.py [--model model/assets/demo] [--threads 2] FILE...

For each reference FILE (default: examples/relu.py and examples/softmax.py) it writes one greedy
end-to-end answer with the runtime's defaults (`Engine.generate_kernel`, dynamic remasking at
0.9) and prints tokens, forwards, seconds, and the time 600 tokens would take at the measured
rate (the issue's bound: a 600-token kernel in at most 20 s on a 2-core CPU). The first call
includes loading. Not covered: GPU timings (bench/model_speed.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--model", default=str(ROOT / "model" / "assets" / "demo"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=1536)
    args = parser.parse_args()
    import torch
    from cudice.model.config import SamplerConfig
    from cudice.model.engine import load_engine

    torch.set_num_threads(args.threads)
    files = args.files or [ROOT / "examples" / "relu.py", ROOT / "examples" / "softmax.py"]
    start = time.perf_counter()
    engine = load_engine(args.model, device="cpu")
    print(f"loaded in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    config = SamplerConfig(max_new_tokens=args.max_new_tokens, temperature=0.0)
    print("file | tokens | forwards | seconds | s per 600 tokens | has ModelNew")
    for path in files:
        gen = engine.generate_kernel(path.read_text(), config)
        per600 = gen.seconds / max(1, gen.num_tokens) * 600
        print(
            f"{path.name} | {gen.num_tokens} | {gen.num_forwards} | {gen.seconds:.2f} | {per600:.1f} | "
            f"{'class ModelNew' in gen.text}"
        )


if __name__ == "__main__":
    main()
