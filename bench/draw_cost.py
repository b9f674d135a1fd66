"""Where a timing repetition's drawing time goes (GPU): each step of the judge's per-set work in
verifier/run/judge_timing.py `_repetition` (draw the inputs, the reference's forward, the digests,
the digest bounds, the sealed copies), timed with a device synchronisation around each, for a few
references of growing size; plus whether the on-device draw raises (make_inputs then falls back
to the CPU draw silently). Prints ms per set per step. The baseline in the same run is a plain
`torch.randn` of the same shape on the device.
Usage: python bench/draw_cost.py [--sets N]
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import sys
import time
import traceback
import types
from collections.abc import Iterator

CASES = {
    "clamp_4096x4096": ("torch.clamp(x, -0.5, 0.5)", "[torch.randn(4096, 4096)]"),
    "sum_8192x8192": ("torch.sum(x, dim=1)", "[torch.randn(8192, 8192)]"),
    "softmax_128x1024": ("torch.softmax(x, dim=1)", "[torch.randn(128, 1024)]"),
}


def reference(forward: str, inputs: str) -> types.ModuleType:
    mod = types.ModuleType("draw_cost_ref")
    src = (
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        f"    def forward(self, x):\n        return {forward}\n"
        f"def get_inputs():\n    return {inputs}\n"
        "def get_init_inputs():\n    return []\n"
    )
    exec(compile(src, "draw_cost_ref.py", "exec"), mod.__dict__)
    return mod


@contextlib.contextmanager
def timed(steps: dict[str, float], step: str) -> Iterator[None]:
    """Add the wall of the block, between two device synchronisations, to steps[step] (ms)."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    yield
    torch.cuda.synchronize()
    steps[step] = steps.get(step, 0.0) + (time.perf_counter() - t0) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=int, default=10)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("draw_cost: needs a CUDA GPU", file=sys.stderr)
        return 2
    from cudice.verifier.run import inputs as inp
    from cudice.verifier.run import seal, witness
    from cudice.verifier.run.dynamic_checks import flatten_outputs
    from cudice.verifier.run.tolerance import output_scale

    dev = "cuda"
    for name, (forward, given) in CASES.items():
        mod = reference(forward, given)
        model = mod.Model().to(dev).eval()
        try:
            inp._run(mod.get_inputs, 1, "as_given", dev)
            print(f"{name}: on-device draw works")
        except Exception:
            print(f"{name}: on-device draw RAISES (make_inputs falls back to the CPU):")
            traceback.print_exc(limit=4)
        steps: dict[str, float] = {}
        shape = tuple(eval(given, {"torch": torch})[0].shape)
        with torch.no_grad():
            for i in range(args.sets + 1):
                if i == 1:
                    steps.clear()  # the first set warms caches and compiles the kernels
                with timed(steps, "plain randn on the CPU"):
                    torch.randn(*shape)
                with timed(steps, "plain randn on the device"):
                    torch.randn(*shape, device=dev)
                with timed(steps, "make_inputs"):
                    seed = inp.secret_seed()
                    x = inp.make_inputs(mod.get_inputs, seed, "as_given", dev, draw_on_device=True)
                with timed(steps, "reference forward"):
                    out = flatten_outputs(model(*[t.clone() for t in x]))
                with timed(steps, "digests"):
                    witness.digest(out + list(x), secrets.randbits(64), dev).cpu().tolist()
                with timed(steps, "output bounds"):
                    [witness.bound(r, 1e-5 * output_scale(r), 1e-5) for r in out]
                with timed(steps, "input bounds"):
                    [witness.bound(t, 0.0, 0.0) for t in x]
                with timed(steps, "sealed clones"):
                    sealed = [t.contiguous().clone() for t in x]
                with timed(steps, "seal"):
                    seal.toggle(sealed, secrets.randbits(63))
        n = args.sets
        print(f"{name}: ms per set, mean of {n}: " + ", ".join(f"{k} {v / n:.2f}" for k, v in steps.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
