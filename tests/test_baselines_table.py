"""benchmarks/baselines.py's pieces that decide what a reader sees: the EM interval and the section it replaces."""

from __future__ import annotations


import pytest

from tests.conftest import load_benchmark

baselines = load_benchmark("baselines")


@pytest.mark.parametrize("k,n", [(0, 8), (2, 8), (8, 8), (57, 300), (150, 300)])
def test_wilson_interval(k, n):
    lo, hi = baselines.wilson(k, n)
    p, z = k / n, 1.96
    assert 0 <= lo <= p <= hi <= 1
    for bound in (lo, hi):  # each bound solves the score equation |p - b| = z * sqrt(b (1 - b) / n)
        if 0 < bound < 1:
            assert abs(p - bound) == pytest.approx(z * (bound * (1 - bound) / n) ** 0.5, abs=1e-9)
    assert (lo == 0) == (k == 0) and (hi == 1) == (k == n)


def test_wilson_narrows_with_more_questions():
    assert baselines.wilson(60, 300)[1] - baselines.wilson(60, 300)[0] < baselines.wilson(8, 40)[1] - baselines.wilson(8, 40)[0]


def test_section_is_replaced_in_place_and_the_rest_kept(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nintro\n", encoding="utf-8")
    baselines.replace_section(doc, "qwen", ["## qwen", "old"])
    baselines.replace_section(doc, "real", ["## real"])
    baselines.replace_section(doc, "qwen", ["## qwen", "new"])
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n\nintro\n") and "old" not in text and text.count("## qwen") == 1
    assert text.index("## qwen") < text.index("## real")  # replaced where it was
