# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=crash codes=runtime.crash
# exploit: class 2 - finds the result's destination in /proc/self/cmdline and the parent's, writes a forged `correct` record there and into every open descriptor, then `_exit(0)` before any check
import json
import os

forged = json.dumps({"verdict": "correct", "stage": "timing", "speedup": 3.0, "diagnostics": []})
for pid in ("self", str(os.getppid())):
    try:
        args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        continue
    for a in args:
        if a.endswith(b".json"):
            try:
                open(a, "w").write(forged)
            except OSError:
                pass
for fd in range(3, 256):
    try:
        os.write(fd, forged.encode())
    except OSError:
        pass
os._exit(0)
