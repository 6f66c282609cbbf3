"""The benchmarks page's results are generated: ``benchmarks/results/results.md`` (which
docs/benchmarks.md includes) is what ``benchmarks.report`` makes of ``results.json``, and
``results/fair_share/fair_share.md`` (which the fair-share page includes too) what
``benchmarks.fair_report`` makes of ``fair_share.json``, so a figure typed into the page by hand,
or a results file from another run, fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import fair_report, report

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def test_the_published_results_are_the_report_of_the_published_run() -> None:
    published = (RESULTS / "results.md").read_text(encoding="utf-8")
    command = re.search(r"Produced by `([^`]+)`", published)
    assert command, "results.md does not say which command produced it"
    results = json.loads((RESULTS / "results.json").read_text(encoding="utf-8"))
    expected = report.markdown(results, command.group(1))
    if (RESULTS / "results.png").is_file():
        expected += "\n![benchmark chart](results.png)\n"
    assert published == expected


def test_the_page_includes_the_published_results() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert "```{include} ../benchmarks/results/results.md" in page


@pytest.mark.parametrize("run", ["fair_share", "fair_share_rabbitmq"])
def test_the_published_fair_share_results_are_the_report_of_the_published_run(run: str) -> None:
    out = RESULTS / run
    published = (out / "fair_share.md").read_text(encoding="utf-8")
    command = re.search(r"Produced by `([^`]+)`", published)
    assert command, f"{run}/fair_share.md does not say which command produced it"
    figures = json.loads((out / "fair_share.json").read_text(encoding="utf-8"))
    expected = fair_report.markdown(figures, command.group(1))
    if (out / "fair_share.png").is_file():
        expected += "\n![each tenant's starts over time](fair_share.png)\n"
    assert published == expected
    # The pages show them as written: the benchmarks page both, the fair-share page Redis's.
    pages = [("benchmarks.md", "../")]
    if run == "fair_share":
        pages.append(("user-guide/fair-share.md", "../../"))
    for page, path in pages:
        text = (ROOT / "docs" / page).read_text(encoding="utf-8")
        assert f"```{{include}} {path}benchmarks/results/{run}/fair_share.md" in text, page
