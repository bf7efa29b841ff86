"""Every share names its denominator, and two sections never print different figures for
the same thing (issue 30, point 3)."""

from __future__ import annotations

import re
import types

import pytest

import tracekit
from tracekit.reports.headline import headline as headline_words
from conftest import shared


@pytest.fixture(scope="module")
def runs():
    return {n: tracekit.analyze(shared("torch", f), workers=1) for n, f in
            (("bert", "h100_bert_small_hf_inference.json.gz"), ("ddp", "a100_ddp_nccl_rank0.json.gz"))}


@pytest.mark.parametrize("name", ["bert", "ddp"])
def test_headline_block_shares_are_the_blocks_tables(runs, name):
    """DDP: the headline said "attention 49%" where the blocks table said 43.5% (in-step
    exclusive time against all GPU time). Now each phase / block share in the headline is
    the blocks table's printed figure."""
    from tracekit.reports.tables import block_rows

    a = runs[name]
    table = block_rows(a)
    printed = {(r[0], r[1]): r[3] for r in table.rows}
    assert table.head[3] == "share" and "share: of the GPU busy time, whole trace, overlap counted once" in table.title
    found = re.findall(r"(\w+) / (\w+) (\d+\.\d%)", headline_words(a.findings)[0])
    assert len(found) == 3
    for phase, block, share in found:
        assert printed[(phase, block)] == share


@pytest.mark.parametrize("name", ["bert", "ddp"])
def test_headline_idle_share_is_the_sum_of_the_ranked_idle_rows(runs, name):
    f = runs[name].findings
    idle = sum(c["time_ns"] for c in f.causes if c["cause"].startswith("idle_"))
    share = re.search(r"the GPU was idle ([\d.]+)% of the step time", headline_words(f)[0])
    assert share and float(share.group(1)) == pytest.approx(100 * idle / f.denominator_ns, abs=0.5)


def test_recoverable_tables_say_their_time_is_held_alone_in_the_steps(runs):
    """Fix-first said 15.5 ms where the blocks table said 19.9 ms for one block: the
    recoverable tables count the time a kernel holds alone inside the steps."""
    from tracekit.reports.tables import fix_blocks

    s = fix_blocks(runs["ddp"], 15)
    assert "time alone in steps" in s.head


def test_host_code_shares_say_they_add_up_per_kind(runs):
    """The "of idle" column summed to more than 200%: frames, ops and ranges each cover the
    same idle time. Within one kind they never pass 100%; the header and note say so."""
    from tracekit.reports.tables import idle_host

    a = runs["ddp"]
    s = idle_host(a)
    assert s.head[-1] == "of idle (per kind)" and "within a kind" in s.note
    h = a.findings.idle_host
    for kind, rows in h.groupby("kind"):
        assert rows["share_of_idle"].sum() <= 1.0 + 1e-9, kind


def test_a_coverage_just_below_the_limit_never_prints_as_the_limit():
    """FLUX: "only 50.0% of GPU kernel time has a cost, below the 50.0% needed"."""
    from tracekit.reports.lines import roofline_line
    from tracekit.common.format import percent_against

    assert percent_against(0.49996, 0.5) == "49.996%" and percent_against(0.4, 0.5) == "40.0%"
    line = roofline_line(types.SimpleNamespace(coverage={"modeled_share": 0.49996}))
    assert "only 49.996% of GPU kernel time" in line and "below the 50.0% needed" in line
