"""Offline fine-tuning for maintainers: SFT with the block-diffusion objective, then BiC-RL."""
