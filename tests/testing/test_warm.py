"""pimjax.testing.warm: the parts of `--of n` split the configurations
between them, and every configuration names a backend that exists."""
import pytest

from pimjax.testing import warm


@pytest.mark.parametrize("n", [1, 2, 3])
def test_parts_cover_every_configuration_once(n):
    parts = [warm.CONFIGS[i::n] for i in range(n)]
    flat = [c for p in parts for c in p]
    assert sorted(map(repr, flat)) == sorted(map(repr, warm.CONFIGS))
    assert len(flat) == len(warm.CONFIGS)


def test_every_configuration_builds_and_every_family_and_controller_is_warmed():
    from pimjax.hw.presets import list_backends
    built = [warm._backend(p, o) for p, o in warm.CONFIGS]
    assert all(b.name == p for b, (p, _) in zip(built, warm.CONFIGS))
    assert {b.name for b in built} == set(list_backends())
    assert {b.group.controller for b in built} == {"dram", "pimflow", "dcc"}


def test_a_part_outside_the_split_is_refused(capsys):
    with pytest.raises(SystemExit):
        warm.main(["--part", "2", "--of", "2"])
    assert "--part must be in 0 .. 1" in capsys.readouterr().err
