"""cudice language server: thin pygls 2.x adapters over the verifier and the model runtime.

Importing this package must stay cheap: it never imports torch or transformers (the model
runtime is imported lazily, inside worker processes). `tests/test_packaging.py` checks this.
"""

__version__ = "0.1.0"
