"""The server's worker processes: each heavy job runs in a child, driven from the server's event loop.

One pair of modules per worker, the server's handle beside the child's entry point:

    quick.py   QuickChecks  ↔  quick_child.py   long-lived, a warm clangd (parse, static checks, diagnostics)
    verify.py  VerifyJobs   ↔  verify_child.py  one killable verification run per document
    model.py   ModelWorker  ↔  model_child.py   long-lived, the loaded model (generate, infill, cancel)

Shared by all three: `protocol.py` (the worker protocol: JSON lines over the child's stdin and
stdout, the promises every child keeps, and both ends: the server's `ChildProcess` and the
child's `EventStream`), `child.py` (the one child-side set-up: priority, thread defaults, dying
with the server, the protocol stream) and `procs.py` (finding and killing a worker's whole
process family, its CPU use, from `/proc`).

Importing this package imports nothing: the server loads each worker module on first use, after
`initialize` has been answered, and no module here imports torch in the server's process.
"""
