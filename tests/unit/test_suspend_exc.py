"""SuspendExcNodes shared with the admin: slurmscale changes only its pools' plainly listed
nodes, and writes every other part of the list back as it was."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from slurmscale.hostlists import expand
from slurmscale.slurm.suspend_exc import groups, parse, render


def pool_node(name: str) -> bool:
    return name.startswith("gpu-")


def test_groups_keep_bracketed_commas_together() -> None:
    assert groups("gpu-[1,3]:1,login1, nid[1-4,9]") == ["gpu-[1,3]:1", "login1", "nid[1-4,9]"]
    assert groups("") == [] and groups("(null)") == ["(null)"]


def test_the_admins_part_is_kept_and_pool_nodes_are_ours() -> None:
    ex = parse("login[1-2],gpu-[1-3],gpu-[4-8]:2,gpu-9,ctl", pool_node)
    assert ex.ours == {"gpu-1", "gpu-2", "gpu-3", "gpu-9"}
    # a counted group is the admin's rule even over pool nodes: never rewritten
    assert ex.theirs == ("login[1-2]", "gpu-[4-8]:2", "ctl")
    assert render(ex.theirs, {"gpu-5", "gpu-6"}) == "login[1-2],gpu-[4-8]:2,ctl,gpu-[5-6]"
    assert render((), ()) == ""
    for empty in ("", "(null)", "  "):
        assert parse(empty, pool_node) == ((), frozenset())


def test_a_mixed_group_is_split() -> None:
    ex = parse("gpu-1,login1", pool_node)
    assert ex == (("login1",), frozenset({"gpu-1"}))
    ex = parse("x[1-2]", lambda n: n == "x1")
    assert ex == (("x2",), frozenset({"x1"}))


names = st.sampled_from([f"gpu-{i}" for i in range(1, 13)] + ["login1", "login2", "ctl"])


@given(admin=st.lists(st.lists(names, min_size=1, max_size=4), max_size=4),
       counted=st.booleans(), before=st.sets(names), want=st.sets(names))
def test_render_then_parse_gives_ours_and_keeps_theirs(admin, counted, before, want) -> None:  # type: ignore[no-untyped-def]
    """Whatever the admin wrote and slurmscale wrote before: after a write, slurmscale's part
    is exactly what it wants (of its pools' nodes) and the admin's non-pool nodes and counted
    groups are all still there."""
    want = {n for n in want if pool_node(n)}
    written = [",".join(g) for g in admin]
    if counted and written:
        written[0] = f"{admin[0][0]}:1"  # "keep 1 of these up"
    start = render(written, {n for n in before if pool_node(n)})
    ex = parse(start, pool_node)
    again = parse(render(ex.theirs, want), pool_node)
    assert again.ours == want
    assert again.theirs == ex.theirs
    admins = {n for g in written if ":" not in g for n in expand(g) if not pool_node(n)}
    kept = {n for g in again.theirs if ":" not in g for n in expand(g)}
    assert admins == kept
    assert [g for g in written if ":" in g] == [g for g in again.theirs if ":" in g]
