"""A worker stand-in on the real child set-up (`cudice.server.workers.child.start`): reports its
environment, prints on stdout as a library would, starts a "compiler" in a session of its own
(as `verifier/build/objects.py` does), echoes requests, and exits with its family when stdin closes.
With the argument `spawn`, it starts a copy of itself instead, on the same stdin and stdout, and
reports that copy's pid: the test then kills this middle process to orphan the copy."""

import json
import os
import subprocess
import sys

from cudice.server.workers import child
from cudice.server.workers.protocol import requests

if sys.argv[1:] == ["spawn"]:
    copy = subprocess.Popen([sys.executable, __file__], start_new_session=True)
    print(json.dumps({"event": "middle", "copy": copy.pid}), flush=True)
    copy.wait()
    sys.exit(0)

stream = child.start({"OMP_NUM_THREADS": "1", "CUDICE_TEST_DEFAULT": "from-child"})
print("a library printing on stdout")
compiler = subprocess.Popen(["sleep", "300"], start_new_session=True)
stream.emit(
    "ready",
    compiler=compiler.pid,
    omp=os.environ.get("OMP_NUM_THREADS"),
    default=os.environ.get("CUDICE_TEST_DEFAULT"),
    nice=os.nice(0),
)
for request in requests(sys.stdin, "fixture"):
    stream.emit("echo", request=request)
child.exit_with_family(0)
