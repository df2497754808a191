"""benchmarks/plots.py: charts and tables from result files, and the docs' committed charts kept true to their data."""

from __future__ import annotations

import doctest
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
DATA = sorted((DOCS / "benchmarks" / "data").glob("*.json"))
PAGE = DOCS / "benchmarks.md"

_spec = importlib.util.spec_from_file_location("bench_plots", ROOT / "benchmarks" / "plots.py")
assert _spec is not None and _spec.loader is not None
plots = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = plots  # dataclasses look their module up
_spec.loader.exec_module(plots)

META = {"platform": "Linux-test", "cpus": 2, "load_before": 1.5, "torch": "2.13.0", "threads": 1, "clock": "wall"}
RESULTS = [
    {"case": "get_leaf", "us": {"tb": 0.2, "td": 0.4, "raw": 0.1}},
    {"case": "to_dtype", "us": {"tb": 10.0, "td": 40.0, "raw": 30.0}},
    {"case": "tb_only", "us": {"tb": 3.0, "raw": 1.5}},
    {"case": "no_raw", "us": {"tb": 3.0, "td": 2.0}},  # tabled, not plotted: no ratio to raw
]


def write(tmp_path: Path, data: object, name: str = "core.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_load_reads_the_rows_and_the_ratios_to_raw(tmp_path):
    suite = plots.load(write(tmp_path, {"meta": META, "results": RESULTS, "summary": {}}))
    assert suite.name == "core"
    assert suite.meta == META
    assert [case for case, _ in suite.rows] == ["get_leaf", "to_dtype", "tb_only", "no_raw"]
    assert suite.ratios() == [("get_leaf", 2.0, 4.0), ("to_dtype", 0.3333, 1.333), ("tb_only", 2.0, None)]


def test_several_raw_strategies_give_the_best_as_raw(tmp_path):
    rows = [{"case": "rows_w64", "us": {"tb": 30.0, "td": 90.0, "raw_span": 40.0, "raw_sorted": 20.0}}]
    suite = plots.load(write(tmp_path, {"results": rows}, "h5.json"))  # h5.py: no meta from older runs
    assert suite.rows == [("rows_w64", {"tb": 30.0, "td": 90.0, "raw": 20.0})]
    assert suite.ratios() == [("rows_w64", 1.5, 4.5)]


COMPILE_ROWS = [
    {
        "case": "step",
        "us": {"tb": 2.0, "td": 2.2, "raw": 1.0},
        "compile_s": {"tb": {"median": 3.0, "min": 2.9}, "td": {"median": 9.0, "min": 8.0}, "raw": {"median": 2.0}},
        "diag": {"tb": {"graphs": 1}},
    }
]


def test_a_compile_result_file_gives_a_second_chart_of_compile_times(tmp_path):
    meta = {**META, "repeats": 15, "compile_repeats": 3}
    steady, compile_time = plots.load_all(write(tmp_path, {"meta": meta, "results": COMPILE_ROWS}, "compile.json"))
    assert (steady.name, steady.what, steady.unit) == ("compile", "median steady-state time", "µs")
    assert steady.ratios() == [("step", 2.0, 2.2)]
    assert (compile_time.name, compile_time.what, compile_time.unit) == ("compile_time", "median compile time", "s")
    assert compile_time.ratios() == [("step", 1.5, 4.5)]
    assert compile_time.meta["repeats"] == 3  # the caption quotes the compile repeats
    assert compile_time.meta["clock"] == "wall"  # compiled.py times compiles by the wall clock
    table = plots.table(compile_time)
    assert "| case | tensorbatch (s) | tensordict (s) | raw (s) |" in table
    assert "| step | 3 | 9 | 2 | 0.33 | 1.50 | 4.50 |" in table
    assert plots.load(tmp_path / "compile.json").name == "compile"


@pytest.mark.parametrize(
    ("compile_s", "message"),
    [
        ([], r"results\[0\] \('step'\): 'compile_s' must map implementation names"),
        ({"tb": {"min": 1.0}}, r"'compile_s'\['tb'\]\['median'\] must be a positive number, got \{'min': 1.0\}"),
        ({"tb": 2.0}, r"'compile_s'\['tb'\]\['median'\] must be a positive number, got 2.0"),
    ],
)
def test_a_malformed_compile_entry_is_a_clear_error(tmp_path, compile_s, message):
    rows = [{**COMPILE_ROWS[0], "compile_s": compile_s}]
    with pytest.raises(plots.ResultFileError, match=message):
        plots.load_all(write(tmp_path, {"results": rows}, "compile.json"))


@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_plot_writes_a_non_empty_image_that_records_its_cases(tmp_path, fmt):
    pytest.importorskip("matplotlib", reason="matplotlib (the docs extra) is not installed")
    suite = plots.load(write(tmp_path, {"meta": META, "results": RESULTS}))
    path = plots.plot(suite, tmp_path / "out", fmt)
    assert path == tmp_path / "out" / f"core.{fmt}"
    data = path.read_bytes()
    assert len(data) > 5_000
    assert data.startswith(b"\x89PNG") if fmt == "png" else b"<svg" in data[:1000]
    assert plots.plotted(path) == {
        "suite": "core",
        "ratios": [["get_leaf", 2.0, 4.0], ["to_dtype", 0.3333, 1.333], ["tb_only", 2.0, None]],
    }
    if fmt == "svg":  # the title quotes the run's facts (text kept as text)
        text = data.decode()
        assert "Linux-test" in text and "torch 2.13.0" in text and "2 CPUs" in text and "load 1.5" in text


def test_the_command_writes_the_images_and_the_page_blocks(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib (the docs extra) is not installed")
    first = write(tmp_path, {"meta": META, "results": RESULTS})
    second = write(tmp_path, {"results": RESULTS[:1]}, "lazy.json")  # no meta (h5.py writes none)
    page = tmp_path / "page.md"
    page.write_text(
        "# B\n\n<!-- plots:core -->\nold\n<!-- /plots:core -->\n\n<!-- plots:lazy -->\n<!-- /plots:lazy -->\n"
    )
    assert plots.main([str(first), str(second), "--out", str(tmp_path / "img"), "--page", str(page)]) == 0
    img = tmp_path / "img"
    assert capsys.readouterr().out.splitlines() == [f"wrote {img / 'core.svg'}", f"wrote {img / 'lazy.svg'}"]
    text = page.read_text()
    assert "old" not in text
    assert "![core: time ratios of tensorbatch and tensordict to raw](img/core.svg)" in text
    assert "| get_leaf | 0.20 | 0.40 | 0.10 | 0.50 | 2.00 | 4.00 |" in text
    assert "| no_raw | 3.00 | 2.00 | - | 1.50 | - | - |" in text
    assert "| tb_only | 3.00 | - | 1.50 | - | 2.00 | - |" in text
    assert "the file records no facts of its run" in text  # lazy.json has no meta
    # a second run leaves the page as it is
    plots.main([str(first), str(second), "--out", str(tmp_path / "img"), "--page", str(page)])
    assert page.read_text() == text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"results": [', r"core\.json: not valid JSON \(Expecting value at line 1 column 14\)"),
        ({"medians_ms": {}}, r"core\.json: no 'results' list at the top level"),
        ({"results": {}}, r"core\.json: no 'results' list at the top level"),
        ({"meta": [], "results": []}, r"core\.json: 'meta' must be an object, got list"),
        ({"results": [{"us": {"tb": 1.0}}]}, r"core\.json: results\[0\]: each result must be an object with a 'case'"),
        ({"results": [{"case": "a", "us": []}]}, r"results\[0\] \('a'\): 'us' must map implementation names"),
        ({"results": [{"case": "a", "us": {"tb": -1, "raw": 1}}]}, r"\('a'\): 'us'\['tb'\] must be a positive number"),
        ({"results": [{"case": "a", "us": {"tb": "1", "raw": 1}}]}, r"'us'\['tb'\] must be a positive number, got '1'"),
        ({"results": [{"case": "a", "us": {"tb": 1.0}}]}, r"core\.json: no case has a 'raw' time"),
    ],
)
def test_a_malformed_result_file_is_a_clear_error(tmp_path, content, message):
    path = write(tmp_path, content)
    with pytest.raises(plots.ResultFileError, match=message):
        plots.load(path)


def test_the_command_reports_a_bad_file_and_writes_nothing(tmp_path, capsys):
    good = write(tmp_path, {"results": RESULTS}, "good.json")
    bad = write(tmp_path, "not json", "bad.json")
    assert plots.main([str(good), str(bad), "--out", str(tmp_path / "img")]) == 2
    assert f"plots.py: {bad}: not valid JSON" in capsys.readouterr().err
    assert not (tmp_path / "img").exists()
    assert plots.main([str(tmp_path / "missing.json")]) == 2
    assert "missing.json: cannot read the result file" in capsys.readouterr().err


def test_a_page_without_the_suite_block_is_a_clear_error(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# B\n")
    with pytest.raises(plots.ResultFileError, match=r"page\.md: no '<!-- plots:core -->' .* block for suite 'core'"):
        plots.update_page(page, {"core": "x"})
    assert page.read_text() == "# B\n"


def test_an_image_not_written_by_the_script_is_refused(tmp_path):
    (tmp_path / "x.svg").write_text("<svg></svg>")
    with pytest.raises(plots.ResultFileError, match=r"x\.svg: no plotted-cases record"):
        plots.plotted(tmp_path / "x.svg")


# the docs' committed results, charts and tables


def test_the_docs_have_committed_results_each_with_its_chart_and_page_block():
    suites = {suite.name for data in DATA for suite in plots.load_all(data)}
    assert suites >= {"core", "lazy", "typed", "nn", "vmap"}
    assert {p.stem for p in (DOCS / "benchmarks").glob("*.svg")} == suites  # no chart without its results
    assert set(re.findall(r"<!-- plots:(\w+) -->", PAGE.read_text("utf-8"))) == suites


def test_every_image_the_docs_reference_exists():
    refs = []
    for page in DOCS.rglob("*.md"):
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            refs.append(target)
            assert (page.parent / target).is_file(), f"{page.relative_to(ROOT)} shows {target}, which is missing"
    assert len(refs) >= len(DATA)


SUITES = [(data, i) for data in DATA for i in range(len(plots.load_all(data)))]


@pytest.mark.parametrize(("data", "index"), SUITES, ids=[f"{p.stem}-{i}" for p, i in SUITES])
def test_the_committed_chart_and_table_match_the_committed_results(data, index, tmp_path):
    suite = plots.load_all(data)[index]
    image = DOCS / "benchmarks" / f"{suite.name}.svg"
    record = plots.plotted(image)
    assert record["suite"] == suite.name
    assert [tuple(r) for r in record["ratios"]] == suite.ratios(), (
        f"{image.relative_to(ROOT)} is older than {data.relative_to(ROOT)}: rerun benchmarks/plots.py (see the page)"
    )
    expected = plots.block(suite, f"benchmarks/{suite.name}.svg")
    assert f"<!-- plots:{suite.name} -->\n{expected}\n<!-- /plots:{suite.name} -->" in PAGE.read_text("utf-8")
    pytest.importorskip("matplotlib", reason="matplotlib (the docs extra) is not installed")
    again = plots.plotted(plots.plot(suite, tmp_path))  # redrawn: the same cases and ratios
    assert again == record


def test_the_docstring_examples_hold():
    failed, attempted = doctest.testmod(plots, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert attempted >= 5 and failed == 0
