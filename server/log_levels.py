"""The log levels of `cudice-lsp --log-level` and of the `cudice.logLevel` setting, written once.

Role: a leaf that the entry point (`__main__.py`, which checks a bare `--log-level LEVEL` before
click or the server are imported), the click command line (`lsp_cli.py`) and the settings schema
(`settings.py`) all import, so none of them imports another for it.
Contract: imports nothing; the order is from least to most verbose.
Not covered: how a level is applied to the server's log (app.py, client_log.py).
"""

LOG_LEVELS = ("error", "warning", "info", "debug")
