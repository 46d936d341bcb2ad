"""Search over drafts: the strategies as objects (`strategy.py`: top-k of the
cost model's prediction, exhaustive with branch and bound, ATiM's balanced
evolutionary search) with their one measurer and one database, the `Tuner`
that composes them with the cost model (`tuner.py`), and the tuning cache
(`cache.py`)."""
from .cache import TuneCache
from .strategy import Database, Evolutionary, Exhaustive, Measurer, Strategy, TopK
from .tuner import Choice, Proposal, Tuner

__all__ = ["Tuner", "Choice", "Proposal", "TuneCache", "Strategy", "TopK", "Exhaustive", "Evolutionary",
           "Measurer", "Database"]
