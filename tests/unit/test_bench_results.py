"""Published benchmark numbers describe the code as it is: every stored result names the code it
measured (benchmarks/fingerprint.py), and a result whose code changed since fails here, naming
the benchmark to re-run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks import fingerprint, readme
from benchmarks.fingerprint import NEEDS, code_digest, digest_files, module_closure, stale

RESULTS = sorted(readme.RESULTS.glob("*.json"))


def _device_present(name: str) -> bool:
    if name != "gpu":
        return True
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize("results", RESULTS, ids=[p.stem for p in RESULTS])
def test_every_stored_result_measured_the_code_as_it_is(results):
    problems = stale(results)
    if problems and results.stem in NEEDS and not _device_present(results.stem):
        # only a machine with the device can measure it again: the page must say it is older
        home = readme.block_home(results.stem)
        assert home is not None and "**Measured on older code.**" in home.read_text(), (
            f"{results.name} is stale and no {NEEDS[results.stem]} is here to re-measure it; its "
            "published block must say so: run `make docs`"
        )
        return
    assert not problems, "\n".join(problems)


def test_every_results_file_has_a_scope_or_is_per_module():
    names = {p.stem for p in RESULTS}
    assert names - {"mutation"} <= set(fingerprint.SCOPES), names - set(fingerprint.SCOPES)


def test_every_benchmark_has_published_its_results():
    missing = set(fingerprint.SCOPES) - {p.stem for p in RESULTS}
    assert not missing, f"no benchmarks/results/NAME.json yet for: {sorted(missing)}"


def test_the_digest_ignores_layout_comments_and_docstrings_but_not_code():
    base = code_digest('def f(x):\n    """Doc."""\n    return x + 1\n')
    assert code_digest("def f(x):  # why\n    return (x\n            + 1)\n") == base
    assert code_digest('def f(x):\n    """Other words."""\n    return x + 1\n') == base
    field = 'class C:\n    x: int = 1\n    """{}"""\n'
    assert code_digest(field.format("Doc.")) == code_digest(field.format("Other words."))
    assert code_digest(field.format("Doc.")) != code_digest(field.format("Doc.").replace("1", "2"))
    assert code_digest("def f(x):\n    return x + 2\n") != base
    assert code_digest("def f(x):\n    return x - 1\n") != base


def test_the_closure_follows_imports_in_function_bodies_and_relative_ones():
    tree = {
        "benchmarks/__init__.py": "",
        "benchmarks/b.py": "import numpy\nfrom components.x import f\n",
        "components/__init__.py": "",
        "components/x.py": "from . import y\ndef f():\n    from components.z import g\n",
        "components/y.py": "",
        "components/z.py": "",
        "components/unused.py": "",
    }
    files = module_closure(("benchmarks.b",), tree.get)
    assert set(files) == set(tree) - {"components/unused.py"}


def test_a_changed_scope_makes_a_result_stale_and_names_the_rerun(tmp_path, monkeypatch):
    scope = {"components/x.py": "def f():\n    return 1\n"}
    monkeypatch.setattr(fingerprint, "scope_files", lambda name, commit=None: dict(scope))
    results = tmp_path / "train.json"
    results.write_text(json.dumps({"code": fingerprint.stamp_for(scope, "abc123")}))
    assert stale(results) == []
    scope["components/x.py"] = "def f():\n    return 2\n"
    assert stale(results) == [
        "train.json was measured on commit abc123; the code it measures changed since: "
        "re-run `make bench-train`"
    ]
    results.write_text(json.dumps({"rows": []}))
    assert stale(results) == ["train.json records no code fingerprint; re-run `make bench-train`"]


def test_mutation_rows_are_stale_when_the_module_or_its_tests_change(tmp_path, monkeypatch):
    files = {"components/m.py": "x = 1\n", "tests/unit/test_m.py": "def test(): pass\n"}
    monkeypatch.setattr(fingerprint, "mutation_files", lambda path, tests, commit=None: dict(files))
    row = {"module": "m", "path": "components/m.py", "tests": ["tests/unit/test_m.py"]}
    results = tmp_path / "mutation.json"
    results.write_text(
        json.dumps(
            {"modules": [{**row, "code": {"commit": "c0", "fingerprint": digest_files(files)}}]}
        )
    )
    assert stale(results) == []
    files["tests/unit/test_m.py"] = "def test(): assert False\n"
    assert stale(results) == [
        "mutation module m was measured on c0: its code or tests changed since; "
        "re-run `make mutation MODULES=m`"
    ]


def test_the_cli_reports_each_results_file():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.fingerprint"],
        cwd=readme.ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if not line.startswith(" ")]
    assert sorted(line.partition(":")[0] for line in lines) == [p.stem for p in RESULTS]
    assert done.returncode == (1 if "stale" in done.stdout else 0), done.stdout + done.stderr


def test_a_benchmark_that_plans_with_the_configs_profiles_reads_only_those(monkeypatch):
    texts = {
        "configs/a.json": json.dumps({"hardware_profile": "cpu-local"}),
        "configs/b.json": json.dumps({"hardware_profile": "h200-141gb"}),
        "configs/c.json": json.dumps({"other": 1}),
        "components/estimate/hardware/cpu-local.json": "{}",
        "components/estimate/hardware/h200-141gb.json": "{}",
        "components/estimate/hardware/a100-80gb.json": "{}",
    }

    def listing(entry: str) -> list[str]:
        return sorted(p for p in texts if p == entry or p.startswith(entry + "/"))

    found = dict(
        fingerprint._data_files(("configs", fingerprint.CONFIG_PROFILES), texts.get, listing)
    )
    assert sorted(found) == [
        "components/estimate/hardware/cpu-local.json",
        "components/estimate/hardware/h200-141gb.json",
        "configs/a.json",
        "configs/b.json",
        "configs/c.json",
    ]
    quality = fingerprint.scope_files("quality")
    assert "components/estimate/hardware/cpu-local.json" in quality
    assert "components/estimate/hardware/h200-141gb.json" not in quality


def test_the_digest_is_the_same_under_pythons_that_add_empty_fields():
    import ast

    text = "class A:\n    def f(self, x=None):\n        return [x]\n"
    base = code_digest(text)
    tree = ast.parse(text)
    for node in ast.walk(tree):  # Python 3.12 gives these nodes an empty ``type_params``
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            node._fields = (*node._fields, "type_params")
            node.type_params = []
    assert fingerprint._canonical(fingerprint._strip_docstrings(tree)) == fingerprint._canonical(
        fingerprint._strip_docstrings(ast.parse(text))
    )
    assert code_digest(text.replace("None", "0")) != base
    assert code_digest(text.replace("[x]", "[]")) != base


def test_the_digest_ignores_the_empty_strings_some_pythons_put_in_format_specs():
    import ast

    text = 'f"{a:<{b}} {c}"'
    tree = ast.parse(text)
    spec = tree.body[0].value.values[0].format_spec  # as Python 3.12 parses it
    spec.values.append(ast.Constant(value=""))
    assert fingerprint._canonical(tree) == fingerprint._canonical(ast.parse(text))
    assert code_digest(text) != code_digest('f"{a:>{b}} {c}"')


def _slow_checks() -> set[str]:
    import ast

    folder = fingerprint.ROOT / "tests" / "reliability"
    return {
        f"tests/reliability/{path.name}::{node.name}"
        for path in sorted(folder.glob("test_*.py"))
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef)
        and any(ast.unparse(d) == "pytest.mark.slow" for d in node.decorator_list)
    }


def test_the_stored_reliability_run_has_each_slow_check_and_passed_them_all():
    """``make test`` leaves the slow checks to ``make test-reliability``: its stored run (fresh
    by the stamp above) must hold a row of each, and every row passed."""
    rows = json.loads((readme.RESULTS / "reliability.json").read_text())["rows"]
    ran = {row["test"].split("[")[0] for row in rows}
    slow = _slow_checks()
    assert len(slow) >= 10  # the parse found them
    assert not slow - ran, f"not in the stored run: {sorted(slow - ran)}; make test-reliability"
    failed = [row["test"] for row in rows if row["result"] != "passed"]
    assert not failed, f"failed or skipped in the stored run: {failed}"
