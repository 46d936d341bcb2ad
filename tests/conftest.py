"""Test configuration: strict dtype promotion and rank promotion errors, so
silent broadcasting or dtype widening in pimjax fails loudly."""
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
from hypothesis import settings  # noqa: E402

jax.config.update("jax_numpy_dtype_promotion", "strict")
# share XLA compilations between the test processes (pytest-xdist) and runs:
# programs of many drafts compile the same padded scan shapes
jax.config.update("jax_compilation_cache_dir",
                  os.path.join(os.path.dirname(os.path.dirname(__file__)), ".jax_cache"))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
jax.config.update("jax_numpy_rank_promotion", "raise")

settings.register_profile("ci", deadline=None, print_blob=True)
settings.load_profile("ci")
