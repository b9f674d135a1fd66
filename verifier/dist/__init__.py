"""Verification on a Ray cluster: `RayBackend` (`ray_backend.py`) compiles on CPU workers and runs
on GPU workers; the task bodies (`tasks.py`) are plain functions, importable and testable
without Ray.
"""
