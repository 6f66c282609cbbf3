"""benchmarks.syscalls reads strace's summary: every call's count, the header and total left out."""

from __future__ import annotations

from benchmarks.syscalls import parse_summary, report

SUMMARY = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 83.16    0.250248        3128        80        40 wait4
  2.84    0.008540           6      1372       589 openat
  2.04    0.006152           6       945           mmap
  0.00    0.000000           0         6           chdir
------ ----------- ----------- --------- --------- ----------------
100.00    0.300935          33      2403       629 total
"""


def test_the_summary_gives_each_calls_count_with_or_without_errors() -> None:
    assert parse_summary(SUMMARY) == {"wait4": 80, "openat": 1372, "mmap": 945, "chdir": 6}


def test_the_report_gives_calls_per_task_for_each_variant() -> None:
    text = report({"plain": parse_summary(SUMMARY), "other": parse_summary("")}, n=2)
    assert "| all | 1201.5 | 0.0 |" in text
    assert "| `openat` | 686.0 | 0.0 |" in text
