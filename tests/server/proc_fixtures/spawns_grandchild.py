"""A worker stand-in: starts a long-lived grandchild in its own process group, prints its pid,
then exits cleanly when stdin closes (as a real worker does)."""

import json
import subprocess
import sys

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(json.dumps({"grandchild": child.pid}), flush=True)
sys.stdin.read()
