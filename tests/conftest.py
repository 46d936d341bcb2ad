"""Test configuration: strict dtype promotion and rank promotion errors, so
silent broadcasting or dtype widening in pimjax fails loudly."""
import gc
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ["PIMJAX_XLA_CACHE"] = "0"     # see the note below

import jax  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

jax.config.update("jax_numpy_dtype_promotion", "strict")
# No persistent XLA compilation cache here (pim_jit's default one is off): two pytest-xdist workers writing
# one cache directory crashed a CI run (segfault in the cache writer, after
# which the run hung until its time limit). Each worker's in-memory cache
# still shares compilations of the padded scan shapes within the process.
jax.config.update("jax_numpy_rank_promotion", "raise")

settings.register_profile("ci", deadline=None, print_blob=True)
settings.load_profile("ci")


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_executables():
    """Drop jax's compilation caches after every test module.  XLA:CPU maps
    about six memory regions per compiled executable and keeps them while
    the executable lives; one process running the whole suite compiles
    enough to pass the kernel's vm.max_map_count (65 530 here) and then
    segfaults inside the next compile (seen 2026-11-22: four single-process
    runs died in `backend_compile_and_load`, at 15 000 maps after the sim
    tests alone).  Freed executables unmap their regions."""
    yield
    jax.clear_caches()
    gc.collect()


# The files that take longest (minutes on 2 cores) are collected first.  `make test` runs
# pytest-xdist's `--dist loadfile --no-loadscope-reorder`, which hands files to the workers in
# collection order (xdist's default reorders them by their number of tests, which hands the notebooks'
# few long cases, ~5 min, out last).  Longest first is the classic LPT rule for two machines, so the
# run cannot end on one long file (measured on a clean clone: 18 min 53 s against 19 min 15 s, the two
# workers already near-evenly loaded).  The rest keep their order (pytest-randomly's shuffle included).
_HEAVY_FIRST = ("tests/test_notebooks.py", "tests/studies/test_serving.py", "tests/backends/hbm_pim/test_hbm_pim.py",
                "tests/backends/attacc/test_attacc.py", "tests/backends/newton/test_newton.py",
                "tests/costmodel/test_features.py", "tests/test_silent_wrong.py", "tests/sim/test_sweep.py",
                "tests/backends/upmem/test_upmem.py")


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(_HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
