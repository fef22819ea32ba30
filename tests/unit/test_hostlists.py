import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmscale.hostlists import HostlistError, compress, expand


def test_expand_ranges_and_lists() -> None:
    assert expand("gpu-[1-3,7],cpu1") == ["gpu-1", "gpu-2", "gpu-3", "gpu-7", "cpu1"]
    assert expand("spot-p5-[01-02]") == ["spot-p5-01", "spot-p5-02"]


@pytest.mark.parametrize("bad", ["", "  ", "a-[1-", "a-[3-1]", "a-[1-2]]", "a b"])
def test_bad_hostlists_name_the_expression(bad: str) -> None:
    with pytest.raises(HostlistError) as e:
        expand(bad)
    assert "hostlist" in str(e.value)


@given(st.lists(st.tuples(st.sampled_from(["spot-", "od-", "gpu-p5-"]),
                          st.integers(1, 5000)), min_size=1, max_size=60))
def test_compress_then_expand_round_trips(pairs: list[tuple[str, int]]) -> None:
    names = {f"{p}{i}" for p, i in pairs}
    assert sorted(expand(compress(sorted(names)))) == sorted(names)
