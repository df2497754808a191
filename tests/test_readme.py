"""The Python examples in README.md run (the README stays true)."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = BLOCKS[index].replace('"/tmp/replay"', repr(str(tmp_path / "replay")))
    namespace: dict = {}
    for earlier in BLOCKS[:index]:  # later blocks may use names from earlier ones (torch, TensorDict)
        exec(compile(earlier.replace('"/tmp/replay"', repr(str(tmp_path / "replay0"))), "README", "exec"),
             namespace)
    exec(compile(code, f"README block {index}", "exec"), namespace)
