"""Names vulture (`make lint`, rules in pyproject.toml's [tool.vulture]) reports as unused that are used:
read by name, called by a library, or public API.  Never imported or run; a new entry says why it is not
dead code.  Registered entry points (`@register` lowering rules, `@_preset` backends, jax's `def_vmap`
rules, pytest fixtures) are skipped by decorator in the configuration instead."""
# ruff: noqa
_ = None

# attributes set on third-party objects: rich tables' caption, torch.backends.cudnn.benchmark
_.caption
_.benchmark

# numba's compiler-pass protocol (lower/inline_njit.py: a pass class numba calls into)
_.run_pass
_._definitions
_.define_pipelines

# PEP 562 module __getattr__ (pimjax/costmodel/__init__.py: lazy exports)
__getattr__

# each backend family's `FAMILY = register(Family(...))`: the registry holds it; the name is the
# family module's handle on its own entry
FAMILY

# Timing fields the DRAM rule table reads by name (hw/dram_rules.py's latency expressions are strings)
tRRD_L
tREF0
tREFW

# named indices of the compiled latency vector (hw/dram_rules.py): the vector's layout, one name per
# entry, spelled out where a rule is not yet read by an engine
RAS
RCD_WR
RRD_L
RRD_S
RTP_AB
BUF_ORDER
COL_ORDER
SIDE_BG
WR_END
WTR_L
SIDE_END

# pimjax/backends/dcc/timing.py: DCC's Ramulator2 address-width constants, transcribed from the fork (kept
# beside the organisation they describe, though the port derives its mapping without them)
N_BA
N_BG
N_COL_BITS
N_RANK
N_ROW_BITS

# public API read by users and notebooks, not inside the repository
_.in_avals          # api.Traced: the traced arguments' (shape, dtype), as jax.stages
_.speedups          # studies.inference.DecodeResult.speedups() (pimjax/studies/README.md)
_.act_bytes         # models.cnn.Layer: input + output bytes of a layer
rule2_skipped       # partition.generate.Stats: whether pruning rule 2 was skipped, in Stats.as_dict()
_.rule2_skipped
_.as_dict

# backends/attacc/geometry.py (AttAcc is edited by another branch; to be judged there): the MAC-record
# column and physical-address helpers no caller uses today
_.record_col
_.phys
