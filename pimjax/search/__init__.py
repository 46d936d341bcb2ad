"""Search over drafts: the tuner (predict the draft space with the cost
model, lower and simulate the top-k; exhaustive; ATiM's balanced
evolutionary search) in `tuner.py`, and the tuning cache in `cache.py`."""
from .cache import TuneCache
from .tuner import Choice, Proposal, Tuner

__all__ = ["Tuner", "Choice", "Proposal", "TuneCache"]
