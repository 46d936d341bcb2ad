"""DCC's data-centric schedule generator: dimension sets -> data tiles ->
pruned tiling drafts (see README.md in this folder)."""
from .dimsets import RESULT, DimensionSet, TensorDim, dimension_sets
from .draft import DimPart, Draft
from .generate import Stats, allocations, drafts, lane_candidates
from .table import DraftTable
from .tiles import SetTiling, owner, set_tilings
from .verify import op_support
from .verify import verify as verify_draft  # `partition.verify` stays the module

__all__ = ["RESULT", "DimensionSet", "TensorDim", "dimension_sets", "Draft", "DimPart", "DraftTable",
           "Stats", "allocations", "drafts", "lane_candidates", "SetTiling", "owner",
           "set_tilings", "op_support", "verify_draft"]
