"""The engines' phases (`pimjax.hw.dram_phases`): each read resolved from the
rule table, and a table edit moving the phases with it."""
from dataclasses import replace

import numpy as np
import pytest

from pimjax.hw import dram_phases as P
from pimjax.hw import dram_rules as R
from pimjax.hw import get_backend
from pimjax.sim.reference import applies


def _rule_index(name, rules=R.RULES):
    return [r.name for r in rules].index(name)


def test_every_read_is_the_rule_the_reference_applies():
    """An independent oracle: for each read and every (next, prev) kind pair
    and bank-group relation it stands for, the rules at its level and window
    that `reference.applies` (the readable model's own test) to that pair
    are exactly the read's rule -- or, for a same-latency read, rules of its
    latency."""
    for phase in P.PHASES:
        for read in P.READS_OF[phase]:
            k = P.PICKS[read.name]
            relations = [read.bank_group == "same"] if read.bank_group else [True, False]
            for nxt in read.next:
                for prev in read.prev:
                    for same in relations:
                        hit = [j for j, r in enumerate(R.RULES)
                               if r.level == read.level and r.window == read.window and r.among == read.among
                               and applies(r, nxt, prev, same)]
                        assert hit, (read.name, prev, nxt)
                        if read.same_latency:
                            assert {R.RULES[j].latency for j in hit} == {R.RULES[k].latency}, read.name
                        else:
                            assert hit == [k], (read.name, prev, nxt, same, [R.NAMES[j] for j in hit])


def test_every_rule_is_read_by_a_phase():
    # every rule and the refresh schedule: some phase reads it (the same-latency reads cover
    # BUF_ORDER beside COL_ORDER)
    rows = np.concatenate(list(P.PHASE_ROWS.values()))
    assert set(rows.tolist()) == set(range(R.N_LAT))
    assert set(P.PICKS.values()) == set(range(len(R.RULES))) - {_rule_index("BUF_ORDER")}


def test_reordered_table_moves_every_index():
    """The engines' constants come from the table, not from positions: a
    permuted table gives each read the permuted index of the same rule."""
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(R.RULES))
    shuffled = tuple(R.RULES[k] for k in perm)
    picks = P.derive(shuffled)
    for name, k in P.PICKS.items():
        assert shuffled[picks[name]].name == R.RULES[k].name or \
            shuffled[picks[name]].latency == R.RULES[k].latency, name


def test_latency_edit_moves_the_phase():
    t = get_backend("hbm-pim").timing
    edited = tuple(replace(r, latency="tRC + tRP") if r.name == "RC" else
                   replace(r, latency="tCCD_L + tBL") if r.name == "CCD_L_AB" else r for r in R.RULES)
    assert P.derive(edited) == P.PICKS                     # same rules, new latencies
    base = P.phase_latencies(R.compile_rules(t))
    new = P.phase_latencies(R.compile_rules(t, rules=edited))
    row = list(P.PHASE_ROWS["row_open"]).index(P.ACT_AFTER_ACT)
    assert new["row_open"][row] == float(t.tRC) + float(t.tRP) != base["row_open"][row]
    col = list(P.PHASE_ROWS["column"]).index(P.GAP_AB_L)
    assert new["column"][col] == float(t.tCCD_L) + float(t.tBL)
    # nothing else moved
    for p in P.PHASES:
        moved = np.flatnonzero(new[p] != base[p])
        assert set(P.PHASE_ROWS[p][moved].tolist()) <= {P.ACT_AFTER_ACT, P.GAP_AB_L}, p


def test_new_rule_needs_a_phase():
    extra = R.Rule("RRD_AB", "channel", ("ACTAB",), ("ACTAB",), "tRRD_S")
    with pytest.raises(ValueError, match="RRD_AB.*read by no phase"):
        P.derive(R.RULES + (extra,))


def test_moved_or_doubled_rule_is_an_error_naming_the_read():
    moved = tuple(replace(r, level="bankgroup") if r.name == "RRD_S" else r for r in R.RULES)
    with pytest.raises(ValueError, match="ACT_AFTER_ACT"):
        P.derive(moved)
    doubled = R.RULES + (replace(R.RULES[_rule_index("RCD_RD")], name="RCD_RD2", latency="tRCDRD + 1"),)
    with pytest.raises(ValueError, match="RD_AFTER_ACT.*RCD_RD2"):
        P.derive(doubled)
    # kinds a read does not tell apart must resolve alike: a tRCD for all-bank reads of its own
    split = tuple(replace(r, next=("RD",)) if r.name == "RCD_RD" else r for r in R.RULES) + (
        R.Rule("RCD_AB", "bank", R.ACTS, ("PIM_RD",), "tRCDRD + 2"),)
    with pytest.raises(ValueError, match="RD_AFTER_ACT"):
        P.derive(split)
