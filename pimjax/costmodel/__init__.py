"""pimjax.costmodel: the learned cost predictor (DCC §IV-D) the tuner ranks drafts with.

Public names (imported lazily, so `import pimjax` does not pull in Flax):

    features(op, draft, backend, shapes=None) -> np.ndarray[F]
    features_table(op, table, backend, shapes=None) -> np.ndarray[n, F]
    CostModel            update / predict / save / load (training: Flax NNX + optax)
    Predictor            predict / load (inference only: numpy)
    load_default(name)   the shipped weights of a preset, as a Predictor
"""
from importlib import import_module

_EXPORTS = {"features": ".features", "features_table": ".features", "F": ".features",
            "FEATURE_NAMES": ".features", "CostModel": ".model", "Predictor": ".predictor",
            "load_default": ".predictor"}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module 'pimjax.costmodel' has no attribute {name!r}")
