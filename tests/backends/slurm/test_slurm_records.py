"""Parsers of sbatch/sacct/squeue output, fed with recorded samples (see data/README.md)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from hpceval.backends.slurm.records import (
    JobRecord,
    SlurmParseError,
    base_job_id,
    expand_array_ids,
    normalize_state,
    parse_elapsed,
    parse_exit_code,
    parse_sacct,
    parse_sbatch_id,
    parse_squeue,
    parse_time,
    unique_base_ids,
)

DATA = Path(__file__).parent / "data"


def sample(name: str) -> str:
    return (DATA / name).read_text()


@pytest.mark.parametrize(
    ("stdout", "job_id"),
    [
        ("14\n", "14"),
        ("14;local\n", "14"),  # multi-cluster form, recorded with `sbatch --parsable -M local`
        ("site banner: remember to cite\n15\n", "15"),
        ("  16  \n\n", "16"),
    ],
)
def test_parse_sbatch_id(stdout: str, job_id: str) -> None:
    assert parse_sbatch_id(stdout) == job_id


@pytest.mark.parametrize("stdout", ["", "\n", "Submitted batch job 12\n", "abc;local"])
def test_parse_sbatch_id_rejects_garbage(stdout: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_sbatch_id(stdout)


@pytest.mark.parametrize(
    ("job_id", "expected"),
    [
        ("12", ["12"]),
        ("12_3", ["12_3"]),
        ("12_[2-5%2]", ["12_2", "12_3", "12_4", "12_5"]),
        ("12_[1,4-6]", ["12_1", "12_4", "12_5", "12_6"]),
        ("12_[0-6:3]", ["12_0", "12_3", "12_6"]),
        ("12_[7]", ["12_7"]),
    ],
)
def test_expand_array_ids(job_id: str, expected: list[str]) -> None:
    assert expand_array_ids(job_id) == expected


@pytest.mark.parametrize("job_id", ["12_[5-2]", "12_[a-b]", "12_[0-9999999]"])
def test_expand_array_ids_rejects_bad_ranges(job_id: str) -> None:
    with pytest.raises(SlurmParseError):
        expand_array_ids(job_id)


def test_small_field_parsers() -> None:
    assert base_job_id("12_3") == base_job_id("12.batch") == base_job_id("12+1") == "12"
    assert unique_base_ids(["12_3", "9", "12_1", "100", "9"]) == ["9", "12", "100"]
    assert normalize_state("CANCELLED by 0") == "CANCELLED"
    assert normalize_state("CANCELLED+") == "CANCELLED"
    assert parse_exit_code("3:0") == (3, 0)
    assert parse_exit_code("0:15") == (0, 15)
    assert parse_exit_code("") == (None, None)
    assert parse_elapsed("00:00:02") == 2
    assert parse_elapsed("1-02:00:00") == 93600
    assert parse_elapsed("05:06") == 306
    assert parse_elapsed("INVALID") is None
    assert parse_time("2026-11-30T02:52:51") == datetime(2026, 11, 30, 2, 52, 51)
    assert parse_time("Unknown") is None
    assert parse_time("None") is None
    assert parse_time("Tomorrow 10:00") is None


def by_name(text: str) -> dict[str, JobRecord]:
    """Records of a recorded sample keyed by job name (ids differ between recordings)."""
    return {r.name: r for r in parse_sacct(text).values() if r.array_task is None}


def test_sacct_22_05_early_snapshot() -> None:
    text = sample("sacct-22.05-early.txt")
    jobs = by_name(text)
    assert jobs["ok"].state == "COMPLETED"
    assert jobs["ok"].exit_code == 0
    assert jobs["ok"].node_list == "node1"
    assert jobs["ok"].partition == "debug"
    assert jobs["ok"].start == datetime(2026, 11, 30, 3, 4, 28)
    assert (jobs["fail"].state, jobs["fail"].exit_code) == ("FAILED", 3)
    assert jobs["canc"].state == "RUNNING"
    assert jobs["canc"].end is None
    assert jobs["held"].reason == "JobHeldUser"
    assert jobs["held"].node_list == ""  # "None assigned"
    # sacct lag: these already ran (see the later sample) but are still PENDING here
    assert jobs["mn"].state == jobs["k9"].state == "PENDING"
    records = parse_sacct(text)
    # pending range 105_[2-5%2] expanded next to the running tasks
    assert [records[f"105_{t}"].state for t in range(6)] == ["RUNNING"] * 2 + ["PENDING"] * 4
    assert records["105_3"].from_range
    assert not records["105_0"].from_range
    assert records["105_5"].array_task == 5
    assert records["105_5"].base_id == "105"


def test_sacct_22_05_later_snapshot() -> None:
    jobs = by_name(sample("sacct-22.05-later.txt"))
    assert jobs["canc"].state == "CANCELLED"
    assert jobs["canc"].raw_state == "CANCELLED by 0"
    assert jobs["mn"].node_list == "node[1-2]"
    assert (jobs["k9"].state, jobs["k9"].exit_code, jobs["k9"].signal) == ("FAILED", 0, 9)
    records = parse_sacct(sample("sacct-22.05-later.txt"))
    assert records["105_2"].reason == "JobArrayTaskLimit"
    assert records["105_0"].elapsed_s == 3


def test_sacct_placeholder_rows_are_skipped() -> None:
    # Recorded right after a burst of submissions: slurmdbd listed stand-in rows (no partition,
    # JobName "allocation", node1, state from the batch step) before the real job records.
    text = sample("sacct-22.05-placeholders.txt")
    assert "allocation" in text
    records = parse_sacct(text)
    assert all(r.name != "allocation" and r.partition for r in records.values())
    assert sample("sacct-22.05-placeholders.txt").count("|\n") == 6
    assert len(records) == 0


def test_sacct_step_rows_are_skipped() -> None:
    records = parse_sacct(sample("sacct-22.05-steps.txt"))
    assert sorted(records) == ["105_0", "105_1", "105_2", "105_3", "105_4", "105_5", "106"]
    assert records["106"].name == "mn"


def test_sacct_duplicates_latest_row_wins() -> None:
    jobs = by_name(sample("sacct-22.05-requeue-duplicates.txt"))
    assert (jobs["rq"].state, jobs["rq"].reason) == ("PENDING", "BeginTime")
    assert (jobs["rqhold"].state, jobs["rqhold"].reason) == ("PENDING", "JobHeldUser")
    assert jobs["rq"].submit == datetime(2026, 11, 30, 3, 5, 56)


def test_sacct_22_05_timeout() -> None:
    record = by_name(sample("sacct-22.05-timeout.txt"))["tmo"]
    assert record.state == "TIMEOUT"
    assert record.elapsed_s is not None and record.elapsed_s >= 60


def test_sacct_24_11_style() -> None:
    records = parse_sacct(sample("sacct-24.11-style.txt"))
    # the range row comes first and must not overwrite the tasks' own rows printed after it
    assert records["41_0"].state == records["41_1"].state == "RUNNING"
    assert records["41_2"].state == records["41_3"].state == "PENDING"
    assert records["42"].name == "eval|name"
    assert records["42"].state == "RUNNING"
    assert records["43"].state == "OUT_OF_MEMORY"
    assert records["44"].elapsed_s == 93600
    assert records["45"].raw_state == "CANCELLED by 1000"
    assert records["45"].start is None


def test_sacct_rejects_truncated_lines() -> None:
    with pytest.raises(SlurmParseError):
        parse_sacct("12|name|RUNNING\n")


def test_sacct_empty_output_is_no_records() -> None:
    assert parse_sacct("") == {}
    assert parse_sacct("\n\n") == {}


def test_squeue_sample() -> None:
    entries = parse_squeue(sample("squeue-22.05.txt"))
    assert entries["105_4"].state == "PENDING"
    assert entries["105_4"].reason == "JobArrayTaskLimit"
    assert entries["105_2"].node_list == "node2"
    assert entries["106"].node_list == "node[1-2]"
    assert entries["104"].state == "CANCELLED"
    assert entries["109"].reason == "DependencyNeverSatisfied"
    assert entries["117"].reason == "job requeued in held state"
    assert entries["108"].node_list == ""
    assert len(entries) == 16


def test_squeue_range_rows_are_expanded() -> None:
    entries = parse_squeue("17_[2-4%1]|PENDING|JobArrayTaskLimit|\n17_1|RUNNING|None|node1\n")
    assert sorted(entries) == ["17_1", "17_2", "17_3", "17_4"]


def test_allocated_gpus_and_nodes_from_recorded_sacct() -> None:
    # Recorded on the dev cluster (fake gpu:4 GRES per node) with the AllocTRES,NNodes columns.
    ended = parse_sacct(sample("sacct-22.05-cost-ended.txt"))
    assert (ended["15"].alloc_gpus, ended["15"].alloc_nodes, ended["15"].elapsed_s) == (4, 2, 3)
    assert (ended["16_0"].alloc_gpus, ended["16_1"].alloc_nodes) == (1, 1)
    assert (ended["19"].alloc_gpus, ended["19"].alloc_nodes) == (0, None)  # never held anything
    assert ended["20_2"].alloc_gpus == 0 and ended["20_2"].state == "CANCELLED"
    running = parse_sacct(sample("sacct-22.05-cost-running.txt"))
    assert (running["18"].state, running["18"].alloc_gpus, running["18"].alloc_nodes) == (
        "RUNNING", 4, 2)
    assert running["20_1"].alloc_gpus == 0 and running["20_1"].from_range


def test_lines_without_usage_columns_still_parse() -> None:
    old = parse_sacct(sample("sacct-22.05-later.txt"))
    assert old and all(r.alloc_gpus is None and r.alloc_nodes is None for r in old.values())
    piped = ("7|a|b|c|RUNNING|0:0|None|Unknown|Unknown|00:00:00||2026-11-30T03:04:28|debug"
             "|gres/gpu=2|1")
    (rec,) = parse_sacct(piped).values()
    assert (rec.name, rec.alloc_gpus, rec.alloc_nodes) == ("a|b|c", 2, 1)


def test_typed_gres_counts_once() -> None:
    from hpceval.backends.slurm.records import parse_alloc_tres

    assert parse_alloc_tres("cpu=8,gres/gpu=8,gres/gpu:h100=8,node=1") == (8, 1)
    assert parse_alloc_tres("cpu=8,gres/gpu:a100=2,gres/gpu:h100=4") == (6, None)
    assert parse_alloc_tres("cpu=8", "3") == (0, 3)
    assert parse_alloc_tres("", "1") == (0, None)


def test_squeue_owner_column() -> None:
    # %U (the owner's uid) as the dev cluster's squeue prints it; lines recorded without the
    # column parse too, with the owner unknown
    entries = parse_squeue("17_[2-3]|PENDING|JobArrayTaskLimit||65534\n18|RUNNING|None|node1|0\n"
                           "19|RUNNING|None|node1\n")
    assert entries["17_3"].user_id == 65534 and entries["18"].user_id == 0
    assert entries["19"].user_id is None
    with pytest.raises(SlurmParseError):
        parse_squeue("20|RUNNING|None|node1|alice\n")  # a name where the uid belongs


def test_squeue_comment_column_keeps_what_the_job_was_given() -> None:
    # %k last: a comment with "|" in it stays whole; "(null)" is squeue's word for none
    entries = parse_squeue("30|RUNNING|None|node1|0|hpceval:20261202-050000-abc123\n"
                           "31|PENDING|Priority||0|(null)\n"
                           '32|PENDING|Priority||0|{"a":"x|y","hpceval":"r"}\n'
                           "33|RUNNING|None|node1|0\n")
    assert entries["30"].comment == "hpceval:20261202-050000-abc123"
    assert entries["31"].comment == "" and entries["33"].comment is None
    assert entries["32"].comment == '{"a":"x|y","hpceval":"r"}'


def test_a_run_comment_carries_its_run_and_keeps_a_sites_json() -> None:
    from hpceval.backends.slurm.formats import carries_run, run_comment

    run = "20261202-050000-abc123"
    assert run_comment(None, run) == f"hpceval:{run}"
    assert run_comment("reaper exempt", run) == f"reaper exempt hpceval:{run}"
    site = '{"OccupiedIdleGPUsJobReaper":{"exemptIdleTimeMins":"60"}}'
    assert json.loads(run_comment(site, run)) == {**json.loads(site), "hpceval": run}
    for comment in (None, "reaper exempt", site, '["a list"]'):
        assert carries_run(run_comment(comment, run), run), comment
        assert not carries_run(run_comment(comment, run), "20261202-050000-abc124"), comment
    assert not carries_run("", run) and not carries_run(f"xhpceval:{run}x", run)


def test_only_flags_sbatch_reads_as_comment_set_it() -> None:
    from hpceval.backends.slurm.formats import sets_comment

    assert [f for f in ("comment", "comme", "comm", "com", "co", "c", "container",
                        "constraint", "contiguous", "core-spec", "comments")
            if sets_comment(f)] == ["comment", "comme", "comm", "com"]
