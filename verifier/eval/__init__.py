"""Scores over many problems: `cudice eval PROBLEMS CANDIDATES` (`cli.py`) and the files it writes
(`report.py`: per-problem JSON, a Markdown summary, the fast_p curve). Verification itself goes
through `cudice.verifier.api` and a backend (`cudice.verifier.backends`).
"""
