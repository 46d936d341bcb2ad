# Two entry points: `make demo` and `make test`. Both bootstrap .venv when it is
# missing or older than pyproject.toml, and are a fast no-op otherwise.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: demo test test-slow test-random docs lint train bench fuzz clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

demo: $(STAMP)
	$(PY) -m pimjax.demo

# numba's compiled kernels into __pycache__ first, once, in two processes: otherwise both xdist workers
# compile the same functions on a clean clone (pimjax/testing/warm.py)
WARM = $(PY) -m pimjax.testing.warm --part 0 --of 2 & $(PY) -m pimjax.testing.warm --part 1 --of 2; wait

# the suite without the cases marked slow (notebooks included); CI (.ci/run) runs those too.  In file
# order: a red CI run names a test, not a shuffle; `make test-random SEED=n` shuffles (pytest-randomly)
test: $(STAMP)
	$(WARM)
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not slow" --durations=25 -p no:randomly

test-slow: $(STAMP)
	$(WARM)
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m slow -p no:randomly

SEED ?= $(shell date +%s)
# the same suite in a random order (tests and, within a worker, files), the seed printed to rerun it
test-random: $(STAMP)
	@echo "pytest-randomly seed $(SEED)"
	$(WARM)
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not slow" -p randomly --randomly-seed=$(SEED)

# the documentation site (mkdocs.yml, docs/): a strict build, every warning an error, into site/
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# ruff over the package, the tests, the benchmarks and the experiments (rules in pyproject.toml), then
# vulture's dead-code check over the same ([tool.vulture]; false positives in vulture_whitelist.py)
lint: $(STAMP)
	$(PY) -m ruff check pimjax tests benchmarks experiments
	$(PY) -m vulture

train: $(STAMP)
	$(PY) -m pimjax.costmodel.train

bench: $(STAMP)
	for b in benchmarks/*_bench.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# the differential fuzzer (pimjax/testing/fuzz.py): N random programs x 4 backends x 2 placements
# against jax.jit, a progress bar and an outcome table; FUZZ_ARGS e.g. "--workers 4 --seed 1000 --tuner flat";
# "--counts run.json" keeps the counts after every program, and "--counts run.json --resume" continues that run
N ?= 1000
fuzz: $(STAMP)
	$(PY) -m pimjax.testing.fuzz $(N) $(FUZZ_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .ruff_cache site
