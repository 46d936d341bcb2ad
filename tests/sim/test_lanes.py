"""`_pack_lanes`: how `cycles_batch` deals record streams to scan lanes."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pimjax.sim.cycles import LANE_SIZES, MAX_BLOCK, MAX_STEPS, _pack_lanes, _split_blocks


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.one_of(st.integers(0, 300), st.integers(0, 40_000)), min_size=1, max_size=400),
       coarse=st.booleans())
def test_every_stream_once_and_lanes_within_their_block(lengths, coarse):
    lengths = np.asarray(lengths, np.int64)
    blocks = _pack_lanes(lengths, coarse)
    seen = [k for _, _, assign in blocks for lane in assign for k in lane]
    # every non-empty stream exactly once, no empty one
    assert sorted(seen) == sorted(np.flatnonzero(lengths > 0).tolist())
    for n, T, assign in blocks:
        assert n in LANE_SIZES and len(assign) == n
        loads = [int(lengths[lane].sum()) if lane else 0 for lane in assign]
        assert max(loads) <= T
        longest = max(int(lengths[k]) for lane in assign for k in lane)
        # padding to buckets at most doubles each of T and n: a block is
        # bounded by MAX_STEPS / MAX_BLOCK unless one stream alone is longer
        assert T <= 2 * max(longest, MAX_STEPS)
        assert n * T <= 4 * MAX_BLOCK or n == LANE_SIZES[0]


def test_long_stream_bounds_the_scan_not_the_sum():
    """One long stream and many short ones: a single block whose scan is
    about the long stream's length, the short ones filling the other lanes."""
    lengths = np.array([20_000] + [500] * 600)
    blocks = _pack_lanes(lengths, coarse=False)
    assert len(blocks) == 1
    n, T, assign = blocks[0]
    assert 20_000 <= T <= 20_000 * 9 // 8 and n <= 32


@settings(max_examples=100, deadline=None)
@given(lengths=st.lists(st.integers(0, 5_000), min_size=1, max_size=600), parts=st.sampled_from([1, 2, 3, 4]))
def test_split_blocks_keep_every_stream_and_the_length(lengths, parts):
    """Splitting blocks over threads: the same streams, each once, in
    blocks of the same length T, never below the smallest lane count."""
    lengths = np.asarray(lengths, np.int64)
    blocks = _pack_lanes(lengths, coarse=False)
    split = _split_blocks(blocks, parts)
    key = lambda bl: sorted(k for _, _, assign in bl for lane in assign for k in lane)   # noqa: E731
    assert key(split) == key(blocks)
    assert {T for _, T, _ in split} <= {T for _, T, _ in blocks}
    for n, T, assign in split:
        assert n in LANE_SIZES and len(assign) <= n and any(assign)
    assert all(sum(1 for m, T2, _ in split if T2 == T) <= parts * sum(1 for _, T3, _ in blocks if T3 == T)
               for _, T, _ in blocks)
