"""Runs docstring examples given as JSON on stdin, with the real tensordict or with tensorbatch behind the switch.

Usage: ``python _doc_runner.py tensordict|tensorbatch < examples.json``. The input is a list of
``{"name", "module", "examples": [{"source", "want", "exc_msg", "lineno", "options"}]}`` (one per docstring, read
by the test from the real tensordict with :class:`doctest.DocTestFinder`). Each docstring runs in a copy of its
module's namespace (under the switch: the alias module's) with ``torch`` added, after ``torch.manual_seed(0)``.
Prints one JSON object, ``{"subject": <package of tensordict.TensorDict>, "results": {name: {"status": "passed" |
"failed", "source", "want", "got"}}}``, ``got`` holding the output or the exception type of the first example that
failed.

TensorDict reprs differ on purpose (tensorbatch prints a tree): an expected output holding a TensorDict repr is
compared by its content (the batch sizes and each leaf's name, shape and dtype), not by its text.

The tests import :func:`collect` (read the examples from the installed tensordict) and :func:`run` (run them in a
fresh interpreter) from here.
"""

from __future__ import annotations

import doctest
import importlib
import io
import json
import os
import pkgutil
import re
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

_TD_REPR = re.compile(r"\b(\w+)\(batch_size=\[([^\]]*)\]")  # a TensorDict, lazy stack or TensorClass
_TREE_LINE = re.compile(r"^([| ]*)[|`]-- (.+?): (?:(\w+)\((.*)|(.*))$")  # "key: Kind(...)" or a value
_TREE_SHAPE = re.compile(r"shape=\[([^\]]*)\], dtype=(\w+)")
_TREE_BATCH = re.compile(r"batch_size=\[([^\]]*)\]")


def _short(dtype: str) -> str:
    for long, short in (("float", "f"), ("uint", "u"), ("int", "i"), ("complex", "c")):
        dtype = dtype.replace(long, short)
    return dtype


def _dims(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _split(body: str) -> list[str]:
    """The entries of a compact body, split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(body):
        if char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return [p.strip() for p in parts if p.strip()]


def _closing(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return len(text)


def _compact(body: str, batch: tuple[str, ...], path: tuple[str, ...], out: dict[Any, Any]) -> None:
    for entry in _split(body):
        key, _, value = entry.partition(": ")
        here = (*path, key.strip())
        brace = value.find("{")
        if brace >= 0:  # a nested TensorDict: "[extra]{...}" or "Class[extra]{...}"
            extra = re.search(r"\[([^\]]*)\]", value[:brace])
            sub = batch + (_dims(extra.group(1)) if extra else ())
            out[here] = ("node", sub)
            _compact(value[brace + 1 : _closing(value, brace)], sub, here, out)
            continue
        leaf = re.fullmatch(r"(\w*)\[([^\]]*)\](@.*)?", value.strip())
        out[here] = ("leaf", batch + _dims(leaf.group(2)), leaf.group(1)) if leaf else ("other",)


def _content_ref(text: str) -> dict[Any, Any] | None:
    """Leaves of tensordict's compact repr ("TensorDict(batch_size=[3], fields={x: f32[4], ...})")."""
    match = _TD_REPR.search(text)
    if match is None or "fields={" not in text[match.end() :]:
        return None
    start = text.index("fields={", match.end()) + len("fields=")
    out: dict[Any, Any] = {(): ("node", _dims(match.group(2)))}
    _compact(text[start + 1 : _closing(text, start)], _dims(match.group(2)), (), out)
    return out


def _content_tb(text: str) -> dict[Any, Any] | None:
    """Leaves of tensorbatch's tree repr."""
    match = _TD_REPR.search(text)
    if match is None:
        return None
    out: dict[Any, Any] = {(): ("node", _dims(match.group(2)))}
    stack: list[str] = []
    for line in text[match.end() :].splitlines()[1:]:
        row = _TREE_LINE.match(line)
        if row is None:
            break
        depth = len(row.group(1)) // 4
        stack[depth:] = [row.group(2)]
        here, kind, rest = tuple(stack), row.group(3), row.group(4)
        if kind is None:  # a non-tensor value printed as it is ("a: 0")
            out[here] = ("other",)
            continue
        shape = _TREE_SHAPE.search(rest)
        if kind in ("TensorDict", "LazyStackedTensorDict") or (_TREE_BATCH.match(rest) and not shape):
            batch = _TREE_BATCH.match(rest)
            out[here] = ("node", _dims(batch.group(1)) if batch else ())
        elif shape is not None and kind not in ("NonTensorData", "NonTensorStack"):
            out[here] = ("leaf", _dims(shape.group(1)), _short(shape.group(2)))
        else:
            out[here] = ("other",)
    return out


def _same(want: dict[Any, Any], got: dict[Any, Any]) -> bool:
    # a non-tensor entry shows as its type name in the compact form: only its presence is compared
    return want.keys() == got.keys() and all(w == got[k] or w == ("other",) for k, w in want.items())


class Checker(doctest.OutputChecker):
    """doctest's checker, except that an output holding a TensorDict repr is compared by content."""

    def check_output(self, want: str, got: str, optionflags: int) -> bool:
        if super().check_output(want, got, optionflags):
            return True
        w_match, g_match = _TD_REPR.search(want), _TD_REPR.search(got)
        if (
            w_match is None
            or g_match is None
            or w_match.group(1) != g_match.group(1)
            or want[: w_match.start()] != got[: g_match.start()]
        ):
            return False
        w_content, g_content = _content_ref(want), _content_tb(got)
        return w_content is not None and g_content is not None and _same(w_content, g_content)


class _Runner(doctest.DocTestRunner):
    def __init__(self) -> None:
        super().__init__(checker=Checker(), verbose=False, optionflags=doctest.ELLIPSIS)
        self.first: dict[str, str] | None = None

    def report_failure(self, out: Any, test: doctest.DocTest, example: doctest.Example, got: str) -> None:
        if self.first is None:
            self.first = {"source": example.source, "want": example.want, "got": got}

    def report_unexpected_exception(
        self, out: Any, test: doctest.DocTest, example: doctest.Example, exc_info: Any
    ) -> None:
        if self.first is None:
            last = traceback.format_exception_only(exc_info[0], exc_info[1])[-1].strip()
            self.first = {"source": example.source, "want": example.want, "got": last[:300]}


def modules(package: str) -> list[str]:
    """``package`` and every module under it (imported: walking a package imports its subpackages)."""
    root = importlib.import_module(package)
    with warnings.catch_warnings():  # tensordict._C warns that it is deprecated when imported
        warnings.simplefilter("ignore", DeprecationWarning)
        return [package] + [info.name for info in pkgutil.walk_packages(root.__path__, package + ".")]


def collect(names: list[str], namespace: Callable[[str], str] = lambda name: name) -> list[dict[str, Any]]:
    """The docstrings holding examples of the modules ``names``, in the runner's JSON form, sorted by name.

    A docstring found from two modules (a re-export) is taken once, from the first. ``namespace(module)``
    names the module whose namespace the docstring runs in (by default its own).
    """
    finder = doctest.DocTestFinder(exclude_empty=True)
    docs: dict[str, dict[str, Any]] = {}
    for name in names:
        with warnings.catch_warnings():  # tensordict.tabular warns that it is deprecated when imported
            warnings.simplefilter("ignore", DeprecationWarning)
            module = importlib.import_module(name)
        for test in finder.find(module, name):
            if not test.examples or test.name in docs:
                continue
            examples = [
                {
                    "source": e.source,
                    "want": e.want,
                    "exc_msg": e.exc_msg,
                    "lineno": e.lineno,
                    "options": {str(k): v for k, v in e.options.items()},
                }
                for e in test.examples
            ]
            docs[test.name] = {"name": test.name, "module": namespace(name), "examples": examples}
    return sorted(docs.values(), key=lambda d: d["name"])


def run(lib: str, docs: list[dict[str, Any]], timeout: float = 240) -> dict[str, dict[str, Any]]:
    """Run ``docs`` in a fresh interpreter with ``lib`` (tensordict, or tensorbatch behind the switch).

    Returns the results by docstring name (see the module docstring).
    """
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        CUDA_VISIBLE_DEVICES="",
        OMP_NUM_THREADS="1",
    )
    proc = subprocess.run(
        [sys.executable, str(Path(__file__)), lib],
        input=json.dumps(docs),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    assert "@@RESULTS@@" in proc.stdout, f"{lib} runner crashed (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
    out = json.loads(proc.stdout.rsplit("@@RESULTS@@", 1)[1])
    assert out["subject"] == lib, f"under {lib}, tensordict.TensorDict came from {out['subject']}"
    return out["results"]


def main() -> None:
    lib = sys.argv[1]
    if lib == "tensorbatch":
        import tensorbatch.compat

        tensorbatch.compat.install()
    import torch

    docs = json.load(sys.stdin)
    results: dict[str, dict[str, Any]] = {}
    for doc in docs:
        try:
            module = importlib.import_module(doc["module"])
            globs = {"torch": torch, **vars(module)}  # tensordict's examples use torch without importing it
        except Exception as exc:  # the module itself does not import: every example fails
            results[doc["name"]] = {
                "status": "failed",
                "source": "",
                "want": "",
                "got": f"import {doc['module']}: {type(exc).__name__}",
            }
            continue
        examples = [
            doctest.Example(
                e["source"],
                e["want"],
                e["exc_msg"],
                lineno=e["lineno"],
                options={int(k): v for k, v in e["options"].items()},
            )
            for e in doc["examples"]
        ]
        test = doctest.DocTest(examples, globs, doc["name"], None, 0, None)
        runner = _Runner()
        torch.manual_seed(0)
        sink = io.StringIO()
        try:
            runner.run(test, out=sink.write, clear_globs=True)
        except BaseException as exc:  # a crash of one docstring must not stop the others
            runner.first = runner.first or {"source": "", "want": "", "got": f"crash: {type(exc).__name__}"}
        first = runner.first
        results[doc["name"]] = {"status": "passed"} if first is None else {"status": "failed", **first}
    import tensordict

    subject = tensordict.TensorDict.__module__.split(".")[0]
    sys.stdout.write("\n@@RESULTS@@" + json.dumps({"subject": subject, "results": results}))


if __name__ == "__main__":
    main()
