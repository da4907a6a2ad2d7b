"""Published benchmark numbers say which code they describe: every stored result names the code
it measured (benchmarks/fingerprint.py), and a result whose code changed since is marked stale
under its published block, never silently passed off as current, and never failing the suite."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks import fingerprint, readme
from benchmarks.fingerprint import code_digest, module_closure, stale

RESULTS = sorted(readme.RESULTS.glob("*.json"))


@pytest.mark.parametrize("name", readme.MEASURED)
def test_every_stale_result_is_marked_and_no_fresh_one_is(name):
    problems = readme.mark_problems(name)
    assert not problems, "\n".join(problems) + "\nrun `make docs` (marks, no measuring)"


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


def _stamped(tmp_path, monkeypatch, name: str, files: dict[str, str], data: dict | None = None):
    """A results file stamped over ``files`` ({path: text}); the working tree is ``files`` as
    the test leaves them."""

    def now(path: str) -> str | None:
        tree = {**files, **(data or {})}
        return fingerprint.file_digest(path, tree[path]) if path in tree else None

    monkeypatch.setattr(fingerprint, "digest_now", now)
    monkeypatch.setattr(fingerprint, "data_files", lambda n: dict(data or {}))
    results = tmp_path / f"{name}.json"
    results.write_text(
        json.dumps({"code": fingerprint.stamp_for({**files, **(data or {})}, "abc123")})
    )
    return results


def test_a_changed_file_of_the_scope_makes_a_result_stale_and_names_it(tmp_path, monkeypatch):
    files = {f"components/m{i}.py": f"def f():\n    return {i}\n" for i in range(5)}
    results = _stamped(tmp_path, monkeypatch, "train", files)
    assert stale(results) == []
    files["components/m1.py"] = "def f():\n    return 'changed'\n"
    assert stale(results) == [
        "train.json measured on commit abc123; changed since: `components/m1.py`; re-run `make bench-train`"
    ]
    for i in (0, 3, 4):
        files[f"components/m{i}.py"] = "x = 1\n"
    del files["components/m2.py"]  # gone counts as changed
    [found] = fingerprint.staleness(results)
    assert found.changed == tuple(f"components/m{i}.py" for i in range(5))
    assert found.mark() == (
        "**Stale:** train.json was measured on commit abc123; changed since: `components/m0.py`, "
        "`components/m1.py`, `components/m2.py` and 2 more. `make bench-stale` measures it again "
        "(this one alone: `make bench-train`)."
    )


def test_comments_and_docstrings_leave_a_result_fresh(tmp_path, monkeypatch):
    files = {"components/x.py": 'def f():\n    """Doc."""\n    return 1\n'}
    results = _stamped(tmp_path, monkeypatch, "train", files)
    files["components/x.py"] = 'def f():  # why\n    """Other words."""\n    return 1\n'
    assert stale(results) == []


def test_a_data_file_added_to_the_scope_makes_a_result_stale(tmp_path, monkeypatch):
    data = {"configs/a.json": "{}"}
    results = _stamped(tmp_path, monkeypatch, "quality", {"components/x.py": "x = 1\n"}, data)
    assert stale(results) == []
    data["configs/b.json"] = '{"model": "new"}'
    [found] = fingerprint.staleness(results)
    assert found.changed == ("configs/b.json",)


def test_a_result_without_digests_is_stale_and_says_so(tmp_path):
    results = tmp_path / "train.json"
    results.write_text(json.dumps({"rows": []}))
    assert stale(results) == [
        "train.json measured on an unrecorded commit; its stamp names no files (measured before "
        "stamps did); re-run `make bench-train`"
    ]
    results.write_text(json.dumps({"code": {"commit": "c0ffee", "fingerprint": "f", "files": 3}}))
    assert "measured on commit c0ffee; its stamp names no files" in stale(results)[0]


def test_a_device_result_says_where_it_can_be_measured_again(tmp_path, monkeypatch):
    files = {"benchmarks/gpu.py": "x = 1\n"}
    results = _stamped(tmp_path, monkeypatch, "gpu", files)
    files["benchmarks/gpu.py"] = "x = 2\n"
    [found] = fingerprint.staleness(results)
    assert found.line().endswith("re-run `make bench-gpu` on a machine with a CUDA device")
    assert "(this one alone: `make bench-gpu`, on a machine with a CUDA device)." in found.mark()


def test_mutation_rows_are_stale_when_the_module_or_its_tests_change(tmp_path, monkeypatch):
    files = {"components/m.py": "x = 1\n", "tests/unit/test_m.py": "def test(): pass\n"}
    files["components/n.py"] = "y = 1\n"  # another module's row, measured apart
    monkeypatch.setattr(fingerprint, "digest_now", lambda p: fingerprint.file_digest(p, files[p]))
    row = {"module": "m", "path": "components/m.py", "tests": ["tests/unit/test_m.py"]}
    other = {**row, "module": "n", "path": "components/n.py", "tests": []}
    results = tmp_path / "mutation.json"
    results.write_text(
        json.dumps(
            {
                "modules": [
                    {**row, "code": fingerprint.stamp_for(dict(list(files.items())[:2]), "c0")},
                    {**other, "code": fingerprint.stamp_for({"components/n.py": "y = 1\n"}, "c1")},
                ]
            }
        )
    )
    assert stale(results) == []
    files["tests/unit/test_m.py"] = "def test(): assert False\n"
    assert stale(results) == [
        "mutation module m measured on commit c0; changed since: `tests/unit/test_m.py`; "
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


@pytest.mark.parametrize("module", ["components/common/tracking.py", "components/train/model.py"])
def test_a_changed_module_stales_exactly_the_stored_results_that_loaded_it(module, monkeypatch):
    """On the stored stamps: a change to one module marks the results whose scope (what their run
    loaded, or their static closure) holds it, and no other."""
    stamps = {
        p.name: (json.loads(p.read_text()).get("code") or {}).get("files") or {}
        for p in RESULTS
        if p.stem != "mutation"
    }
    before = {name for name in stamps if fingerprint.staleness(readme.RESULTS / name)}
    real = fingerprint.digest_now
    monkeypatch.setattr(fingerprint, "digest_now", lambda p: "0" * 16 if p == module else real(p))
    after = {name: fingerprint.staleness(readme.RESULTS / name) for name in stamps}
    holders = {name for name, files in stamps.items() if module in files}
    assert {name for name, found in after.items() if found} == holders | before
    assert all(module in after[name][0].changed for name in holders)
