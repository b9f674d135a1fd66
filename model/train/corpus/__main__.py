"""`python -m cudice.model.train.corpus ...` (the same commands as `cudice train corpus ...`)."""

from cudice.model.train.corpus.cli import corpus_group

corpus_group()
