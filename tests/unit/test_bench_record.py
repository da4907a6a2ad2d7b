"""A recorded benchmark run is stamped with what its processes loaded (benchmarks/record.py), a
stale result is marked under its block and nowhere else (benchmarks/readme.py), and
``make bench-stale`` measures exactly the stale ones, cheapest first (benchmarks/rerun.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from benchmarks import fingerprint, readme, record, rerun
from benchmarks.fingerprint import ROOT

CHILD = textwrap.dedent(
    """
    import json, os, subprocess, sys
    import components.common.storage
    # a grandchild that sets its own PYTHONPATH still records
    env = {**os.environ, "PYTHONPATH": "/nonexistent"}
    subprocess.run([sys.executable, "-c", "import components.train.model"], env=env, check=True)
    open(sys.argv[1], "w").write(json.dumps({"rate": 1}))
    """
)


def _recorded(results, *command: str) -> subprocess.CompletedProcess:
    """``python -m benchmarks.record loader --results RESULTS -- python -c ...`` as make runs it."""
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.record", "loader", "--results", str(results), "--"]
        + [sys.executable, "-c", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_recorded_run_is_stamped_with_the_modules_its_processes_loaded(tmp_path):
    results = tmp_path / "loader.json"
    done = _recorded(results, CHILD, str(results))
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(results.read_text())
    code = data["code"]
    assert data["rate"] == 1 and code["scope"] == "loaded" and code["seconds"] > 0
    files = set(code["files"])
    assert {"components/common/storage.py", "components/train/model.py"} <= files
    assert {"components/__init__.py", "components/train/__init__.py"} <= files  # packages run too
    assert set(fingerprint.data_files("loader")) <= files  # the configs steer it
    assert "components/evaluate/decision.py" not in files  # nothing loaded it
    assert not any(p.startswith("benchmarks/record") for p in files)  # the recorder is no code
    for path, digest in code["files"].items():
        assert digest == fingerprint.digest_now(path), path
    assert fingerprint.staleness(results) == []
    assert "stamped with the" in done.stdout


def test_a_failed_or_silent_command_leaves_the_stamp_alone(tmp_path):
    results = tmp_path / "loader.json"
    results.write_text(json.dumps({"code": {"commit": "c0", "files": {}}}))
    before = results.read_text()
    for code in ("raise SystemExit(3)", "pass"):
        done = _recorded(results, code)
        assert done.returncode == (3 if "3" in code else 0)
        assert results.read_text() == before


def test_the_recorders_lines_become_repository_paths(tmp_path):
    folder = tmp_path / "loaded"
    folder.mkdir()
    (folder / "1.txt").write_text(
        "module components.train.model\n"
        "module components.train.no_such_module\n"  # `from pkg import name`: no file
        "module benchmarks.readme\n"  # publishes, measures nothing
        f"file {ROOT / 'benchmarks/record_hook/sitecustomize.py'}\n"
        f"file {ROOT / 'tests/conftest.py'}\n"
        f"file {sys.modules['json'].__file__}\n"  # a library
    )
    (folder / "2.txt").write_text("module components.evaluate.decision\nmodule components.train")
    assert record.loaded(folder) == {
        "components/__init__.py",
        "components/train/__init__.py",
        "components/train/model.py",
        "components/evaluate/__init__.py",
        "components/evaluate/decision.py",
        "tests/conftest.py",  # no package: its file counts alone
    }


def test_the_hook_is_inert_without_a_recorded_run(tmp_path):
    record.install_hook()
    done = subprocess.run(
        [sys.executable, "-c", "import sys; print(any('record_hook' in p for p in sys.path))"],
        capture_output=True,
        text=True,
        env={k: v for k, v in __import__("os").environ.items() if k != record.ENV},
        check=True,
    )
    assert done.stdout.strip() == "False"


# --- the marks ---------------------------------------------------------------------------------


def _site(tmp_path, monkeypatch, stale: bool):
    """A documentation page with a train block, and a train result fresh or stale."""
    files = {"components/x.py": "x = 1\n"}
    results = tmp_path / "results"
    results.mkdir()
    (results / "train.json").write_text(json.dumps({"code": fingerprint.stamp_for(files, "c0")}))
    now = "x = 2\n" if stale else files["components/x.py"]
    monkeypatch.setattr(fingerprint, "digest_now", lambda p: fingerprint.file_digest(p, now))
    monkeypatch.setattr(fingerprint, "data_files", lambda name: {})
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("front\n")
    page = tmp_path / "docs" / "perf.md"
    page.write_text("<!-- bench:train:start -->\n| t |\n<!-- bench:train:end -->\n")
    return results, page


def test_make_docs_marks_a_stale_result_and_the_check_holds_the_mark(tmp_path, monkeypatch):
    results, page = _site(tmp_path, monkeypatch, stale=True)
    assert readme.mark_problems("train", tmp_path, results)  # not marked yet
    mark = fingerprint.staleness(results / "train.json")[0].mark()
    readme.update_block("train", "| t |" + readme.marks(results / "train.json"), root=tmp_path)
    assert mark in page.read_text() and readme.mark_problems("train", tmp_path, results) == []
    page.write_text(page.read_text().replace(mark, ""))  # removed by hand
    assert readme.mark_problems("train", tmp_path, results) == [
        f"train: stale but not marked: {mark}"
    ]


def test_a_mark_on_a_fresh_result_is_refused(tmp_path, monkeypatch):
    results, page = _site(tmp_path, monkeypatch, stale=False)
    assert readme.mark_problems("train", tmp_path, results) == []
    forged = "**Stale:** train.json was measured on commit c0; changed since: `x.py`."
    page.write_text(page.read_text().replace("| t |", f"| t |\n\n{forged}"))
    assert readme.mark_problems("train", tmp_path, results) == [
        f"train: marked stale, but its code is as measured: {forged}"
    ]


# --- make bench-stale ---------------------------------------------------------------------------


def _stale(subject: str, rerun_command: str, needs: str | None = None):
    return [fingerprint.Stale(subject, "c0", ("components/x.py",), rerun_command, needs)]


def test_the_round_runs_the_stale_cheapest_first_and_says_how_long(tmp_path, monkeypatch):
    seconds = {"quality": 1800.0, "gate": 240.0, "serving": None, "gpu": 600.0, "train": 30.0}
    for name, s in seconds.items():
        code = {"commit": "c0", "files": {}, **({"seconds": s} if s else {})}
        (tmp_path / f"{name}.json").write_text(json.dumps({"code": code}))
    (tmp_path / "mutation.json").write_text(
        json.dumps(
            {"modules": [{"module": "a", "seconds": 60.0}, {"module": "b", "seconds": 90.0}]}
        )
    )
    found = {
        "quality": _stale("quality.json", "make bench-quality"),
        "gate": _stale("gate.json", "make bench-gate"),
        "serving": _stale("serving.json", "make bench-serving"),
        "gpu": _stale("gpu.json", "make bench-gpu", "a CUDA device"),
        "train": [],  # fresh
        "mutation": [
            fingerprint.Stale("mutation module a", "c0", ("x",), "make mutation MODULES=a"),
            fingerprint.Stale("mutation module b", "c0", ("x",), "make mutation MODULES=b"),
        ],
    }
    monkeypatch.setattr(rerun, "staleness", lambda path: found[path.stem])
    monkeypatch.setattr(rerun, "_cuda", lambda: False)
    steps = rerun.plan(tmp_path)
    assert [s.command for s in steps] == [
        ("make", "mutation", "MODULES=a b"),
        ("make", "bench-gate"),
        ("make", "bench-quality"),
        ("make", "bench-serving"),  # no stored time: after those with one
        ("make", "bench-gpu"),  # cannot run here
    ]
    assert steps[0].seconds == 150.0 and steps[-1].blocked == "needs a CUDA device"
    text = rerun.describe(steps)
    assert text.splitlines()[0] == (
        "bench-stale: 4 to measure again, expected 36 min plus 1 with no recorded time"
    )
    assert "not here: gpu.json (needs a CUDA device): stays marked stale" in text


def test_the_round_runs_each_step_and_says_what_failed(monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(
        rerun.subprocess,
        "call",
        lambda cmd, cwd: ran.append(cmd) or (2 if "bench-gate" in cmd else 0),
    )
    steps = [
        rerun.Step("train.json", ("make", "bench-train"), 30.0),
        rerun.Step("gate.json", ("make", "bench-gate"), 240.0),
        rerun.Step("gpu.json", ("make", "bench-gpu"), 600.0, "needs a CUDA device"),
    ]
    assert rerun.run(steps) == 1
    assert [c[1:] for c in ran] == [("bench-train",), ("bench-gate",), ["-m", "benchmarks.readme"]]
    out = capsys.readouterr().out
    assert "bench-stale [1/2] make bench-train: expected 30 s; 0 s spent; about 4 min to go" in out
    assert "[2/2] make bench-gate: expected 4 min" in out
    assert "failed: gate.json: their results stay marked stale" in out


def test_the_plan_of_this_tree_lists_every_stale_result():
    steps = rerun.plan()
    stale = {p.name for p in readme.RESULTS.glob("*.json") if fingerprint.staleness(p)}
    listed = {s.what for s in steps if not s.what.startswith("mutation")}
    assert listed == stale - {"mutation.json"}


@pytest.mark.parametrize("argv", [[], ["loader"], ["loader", "--"]])
def test_the_recorder_wants_a_name_and_a_command(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        record.main(argv)
    assert exit_.value.code == 2


def test_a_stamp_says_changes_only_when_a_file_it_names_differed_from_head():
    head = fingerprint.head_commit()
    results_written = {"benchmarks/results/estimate.json", "docs/performance.md"}
    assert fingerprint._commit_of(["components/x.py"], results_written) == head
    assert fingerprint._commit_of(["components/x.py"], {"components/x.py"}) == f"{head}+changes"


def test_the_scope_report_names_what_the_static_closure_misses(tmp_path, monkeypatch):
    closure = {"components/a.py": "", "components/b.py": "", "components/c.py": ""}
    monkeypatch.setattr(fingerprint, "scope_files", lambda name, commit=None: dict(closure))
    results = tmp_path / "train.json"
    loaded = {"components/a.py": "0" * 16, "components/run_as_main.py": "1" * 16}
    results.write_text(json.dumps({"code": {"scope": "loaded", "files": loaded}}))
    assert fingerprint.scope_size(results) == (
        "scope: 2 files loaded or read in the run; the static closure has 3: 2 of them never "
        "loaded, and it misses 1 the run loaded (components/run_as_main.py)"
    )
    results.write_text(json.dumps({"code": {"scope": "imports", "files": {}}}))
    assert "the static closure, 3 files (not recorded in a run)" in fingerprint.scope_size(results)
