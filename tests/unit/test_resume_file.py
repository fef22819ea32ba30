import json

import pytest

from slurmscale.slurm.resume_file import ResumeFileError, parse_resume_file

SLURM_22_05 = '{"jobs":[{"job_id":1,"nodes":"cloud-[1-2]"}],"all_nodes":"cloud-[1-2]"}'
SLURM_24_11 = json.dumps({
    "jobs": [{"extra": None, "job_id": 7, "features": None, "nodes_alloc": "c-[1-3]",
              "nodes_resume": "c-[2-3]", "oversubscribe": "OK", "partition": "spot",
              "reservation": None}],
    "all_nodes_resume": "c-[2-3]",
})


def test_parses_slurm_22_05_format() -> None:
    rf = parse_resume_file(SLURM_22_05)
    assert rf.all_nodes == ("cloud-1", "cloud-2")
    assert [(j.job_id, j.nodes) for j in rf.jobs] == [(1, ("cloud-1", "cloud-2"))]


def test_parses_slurm_23_02_plus_format_using_nodes_resume() -> None:
    rf = parse_resume_file(SLURM_24_11)
    assert rf.all_nodes == ("c-2", "c-3")
    assert rf.jobs[0].nodes == ("c-2", "c-3")  # only the nodes to power up, not nodes_alloc
    assert rf.jobs[0].partition == "spot"


def test_tolerates_fields_a_future_slurm_adds() -> None:
    d = json.loads(SLURM_24_11)
    d["new_top_level"] = {"x": 1}
    d["jobs"][0]["gpus_alloc"] = "8"
    assert parse_resume_file(json.dumps(d)).jobs[0].job_id == 7


def test_several_jobs_and_no_jobs() -> None:
    text = json.dumps({"jobs": [{"job_id": 1, "nodes": "a-[1-2]"},
                                {"job_id": 2, "nodes": "a-3"}], "all_nodes": "a-[1-3]"})
    assert [j.job_id for j in parse_resume_file(text).jobs] == [1, 2]
    assert parse_resume_file('{"jobs":[],"all_nodes":"a-1"}').all_nodes == ("a-1",)


@pytest.mark.parametrize("text, needle", [
    ("not json", "not JSON"),
    ("[1,2]", "JSON object"),
    ('{"jobs":[{"nodes":"a-1"}]}', "job_id"),
    ('{"jobs":[{"job_id":"x","nodes":"a-1"}]}', "'x'"),
    ('{"jobs":[{"job_id":1}]}', "names no nodes"),
    ('{"jobs":[{"job_id":1,"nodes":"a-[1-"}]}', "a-[1-"),
    ('{"jobs":[{"job_id":1,"nodes":"a-9"}],"all_nodes":"a-1"}', "missing from all_nodes"),
])
def test_malformed_files_are_refused_with_the_bad_part_named(text: str, needle: str) -> None:
    with pytest.raises(ResumeFileError) as e:
        parse_resume_file(text)
    assert needle in str(e.value)
