"""Scripted stand-ins the language-server e2e tests load *inside the real worker processes*.

`fake_engine` replaces `cudice.model.engine` (via CUDICE_ENGINE_MODULE) and `fake_verifier`
replaces `cudice.verifier.api` (via CUDICE_VERIFY_MODULE), so the tests can drive slow, hung,
crashing and cancelled work deterministically. The real engine and verifier are exercised by
the tests that build a tiny checkpoint and verify examples/relu_broken.py.
"""
