"""cudice model runtime: load DICE/SDAR block-diffusion checkpoints and decode with them.

Importing this package does not import torch; the heavy modules import it themselves.
"""
