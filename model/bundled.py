"""The default model: cudice's own small block-diffusion model, shipped in the package.

`default_model_dir()` is `model/assets/demo/` when it holds a complete checkpoint, else None;
`resolve_model_path(path)` is the one rule every entry point uses: an explicit path (flag,
setting, `CUDICE_MODEL`) wins, then the bundled model, unless `CUDICE_NO_BUNDLED_MODEL=1`.
`demo_card()` reads `demo_card.json` next to the weights: what the model is, how it was trained,
its held-out scores, and what it cannot do. This module imports neither torch nor
transformers (the language server imports it).

The demo model was trained by `bench/train_demo.sh` on the generated corpus of
`cudice.model.train.corpus` (docs/model.md, "The demo model"). It knows only that corpus's
eight problem families (elementwise unary/binary ops and chains, reductions, argmax/argmin,
softmax/log-softmax, LayerNorm/RMSNorm, matmul with epilogues, MSE/L1/Huber/hinge losses), and
only KernelBench-shaped files; for real work use a DICE checkpoint (`--model DIR`).

Not covered: downloading or updating the weights, and more than one bundled model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

DEMO_DIR = Path(__file__).resolve().parent / "assets" / "demo"
CARD = "demo_card.json"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
DISABLE_ENV = "CUDICE_NO_BUNDLED_MODEL"
LIMITATIONS = (
    "cudice's small demo model (20M parameters), trained only on cudice's generated corpus: "
    "elementwise unary/binary ops and their chains, reductions (sum, mean, max, min), argmax/argmin,"
    " softmax/log-softmax, LayerNorm/RMSNorm, matmul with transposes and epilogues, and "
    "regression/classification losses, in KernelBench-shaped files. On problems of those families it"
    " has never seen, about 1 answer in 7 is correct (11/80 on the H200); most others are well-"
    "formed kernels of the nearest trained composition (for examples/relu.py it writes an abs "
    "kernel, for examples/softmax.py a broken one): always verify. It cannot write kernels for other"
    " operators (convolutions, attention, scans, ...), for models with parameters, or for files that"
    " do not look like its corpus, and its kernels are plain rather than tuned. For real work use a "
    "DICE checkpoint (e.g. DICE-1.7B): --model DIR or cudice.model.path."
)
# Several times the length of the corpus's template answers in its line-level tokenizer
# (docs/benchmarks.md): room for longer kernels, and still a short run for a confused model.
DEMO_MAX_NEW_TOKENS = 1536


def default_model_dir() -> Path | None:
    """The bundled checkpoint's directory, or None when it is absent, incomplete or disabled."""
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return None
    if all((DEMO_DIR / name).is_file() for name in REQUIRED_FILES):
        return DEMO_DIR
    return None


def resolve_model_path(path: str | None) -> tuple[str | None, bool]:
    """(the model to load, whether it is the bundled one) for an explicit `path` or None/''."""
    if path:
        return path, False
    bundled = default_model_dir()
    return (str(bundled), True) if bundled is not None else (None, False)


def is_bundled(path: str | Path) -> bool:
    try:
        return Path(path).resolve() == DEMO_DIR
    except OSError:
        return False


def demo_card(directory: str | Path | None = None) -> dict[str, Any]:
    """The bundled model's card (`demo_card.json`), with the limitations always present."""
    folder = Path(directory) if directory is not None else DEMO_DIR
    try:
        card = json.loads((folder / CARD).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        card = {
            "name": "cudice-demo",
            "trained": False,
            "what": "no demo_card.json next to the weights: treat them as untrained",
        }
    if not isinstance(card, dict):
        card = {"name": "cudice-demo", "trained": False}
    card.setdefault("limitations", LIMITATIONS)
    return card
