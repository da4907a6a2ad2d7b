"""The documentation stays true to the code: generated blocks equal what their sources render,
the pipeline picture matches the compiled pipeline, relative links resolve, the README stays a
front page."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import fingerprint, readme
from benchmarks.pipeline_graph import compiled_pipeline, mermaid, task_names

ROOT = readme.ROOT
README = ROOT / "README.md"
DOCS = readme.doc_files()
GENERATED = (*readme.FROM_CODE, *readme.MEASURED)
FIX = "run `make docs` (python -m benchmarks.readme) and commit the result"


def block(name: str) -> str:
    """The text between the ``name`` block's markers, wherever it lives."""
    home = readme.block_home(name)
    assert home is not None, f"no file of README.md, docs/*.md holds the {name} block"
    start, end = readme.markers(name)
    return home.read_text().split(start, 1)[1].split(end, 1)[0].strip("\n")


# --- the block writer ------------------------------------------------------------------------


def _site(tmp_path: Path, readme_text: str, docs: dict[str, str]) -> Path:
    (tmp_path / "README.md").write_text(readme_text)
    (tmp_path / "docs").mkdir()
    for name, text in docs.items():
        (tmp_path / "docs" / name).write_text(text)
    return tmp_path


def test_update_block_rewrites_the_docs_file_that_holds_the_markers(tmp_path):
    site = _site(
        tmp_path,
        "front page\n",
        {
            "a.md": "a\n",
            "perf.md": "before\n<!-- bench:x:start -->\nold\n<!-- bench:x:end -->\nafter\n",
        },
    )
    home = readme.update_block("x", "| new \\1 table |", root=site)
    assert home == site / "docs" / "perf.md"
    assert (
        home.read_text()
        == "before\n<!-- bench:x:start -->\n| new \\1 table |\n<!-- bench:x:end -->\nafter\n"
    )
    assert (site / "README.md").read_text() == "front page\n"
    assert (site / "docs" / "a.md").read_text() == "a\n"


def test_update_block_rewrites_the_readme_when_it_holds_the_markers(tmp_path):
    site = _site(tmp_path, "x\n<!-- bench:y:start -->\n<!-- bench:y:end -->\n", {"a.md": "a\n"})
    assert readme.update_block("y", "picture", root=site) == site / "README.md"
    assert (
        site / "README.md"
    ).read_text() == "x\n<!-- bench:y:start -->\npicture\n<!-- bench:y:end -->\n"


def test_update_block_without_markers_writes_nothing_and_says_so(tmp_path, capsys):
    site = _site(
        tmp_path, "front\n", {"a.md": "<!-- bench:other:start -->\n<!-- bench:other:end -->\n"}
    )
    assert readme.update_block("x", "table", root=site) is None
    assert "the x block is not written" in capsys.readouterr().out
    assert (site / "README.md").read_text() == "front\n"


def test_a_block_in_two_files_is_refused(tmp_path):
    marked = "<!-- bench:x:start -->\n<!-- bench:x:end -->\n"
    site = _site(tmp_path, marked, {"a.md": marked})
    with pytest.raises(
        ValueError, match=r"is in 2 files \(README\.md, docs/a\.md\): keep it in one"
    ):
        readme.update_block("x", "table", root=site)
    assert (site / "README.md").read_text() == marked


def test_a_start_marker_without_its_end_is_refused(tmp_path):
    site = _site(tmp_path, "front\n", {"a.md": "<!-- bench:x:start -->\ntable\n"})
    with pytest.raises(
        ValueError, match=r"a\.md: <!-- bench:x:start --> has no <!-- bench:x:end -->"
    ):
        readme.update_block("x", "table", root=site)


def test_publish_writes_the_json_and_the_block_where_it_lives(tmp_path, monkeypatch):
    site = _site(
        tmp_path, "front\n", {"perf.md": "<!-- bench:z:start -->\nold\n<!-- bench:z:end -->\n"}
    )
    monkeypatch.setattr(readme, "ROOT", site)
    out = readme.publish("z", {"rate": 1}, "| rate | 1 |", results=str(site / "z.json"))
    assert json.loads(out.read_text()) == {"rate": 1}
    assert "| rate | 1 |" in (site / "docs" / "perf.md").read_text()
    # a smoke run is no measurement: the block keeps the last real one
    readme.publish("z", {"rate": 2}, "| rate | 2 |", results=str(site / "z.json"), throwaway=True)
    assert "| rate | 1 |" in (site / "docs" / "perf.md").read_text()


def test_a_published_result_records_the_code_it_measured(tmp_path):
    out = readme.publish(
        "train", {"rate": 1}, "| rate | 1 |", results=str(tmp_path / "t.json"), readme=False
    )
    code = json.loads(out.read_text())["code"]
    assert code["fingerprint"] == fingerprint.digest_files(fingerprint.scope_files("train"))
    assert code["commit"].removesuffix("+changes") == fingerprint.head_commit()


# --- the published blocks match their sources ------------------------------------------------


@pytest.mark.parametrize("name", GENERATED)
def test_each_generated_block_lives_in_exactly_one_file(name):
    start, end = readme.markers(name)
    homes = [p for p in DOCS if start in p.read_text()]
    assert len(homes) == 1, f"{start} is in {[p.name for p in homes]}"
    text = homes[0].read_text()
    assert text.count(start) == 1 and text.count(end) == 1 and text.index(start) < text.index(end)


@pytest.mark.parametrize(
    "name", [n for n in readme.MEASURED if (readme.RESULTS / f"{n}.json").is_file()]
)
def test_each_benchmark_block_is_what_its_results_file_renders(name):
    """The table and its stale marks (tests/unit/test_bench_results.py names a wrong mark)."""
    assert block(name) == readme.table_from_results(name), f"the {name} block is stale: {FIX}"


def _declared_markers() -> set[str]:
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    return {line.partition(":")[0] for line in declared["ini_options"]["markers"]}


@pytest.mark.parametrize("page", ["docs/development.md", "tests/README.md"])
def test_the_marker_tables_list_the_declared_markers(page):
    text = (ROOT / page).read_text()
    table = text[text.index("| marker |") :].split("\n\n")[0]
    listed = {m for m in re.findall(r"^\| `(\w+)` \|", table, re.M)}
    assert listed == _declared_markers(), f"{page}: the marker table lists {sorted(listed)}"


# --- the picture of the pipeline -------------------------------------------------------------


def test_the_readme_picture_has_the_compiled_pipelines_tasks():
    ir = compiled_pipeline()
    drawn = set(re.findall(r'\["(?:if )?([^"]+)"\]', block("pipeline-graph")))
    assert drawn == set(task_names(ir)), f"the README's picture of the pipeline is stale: {FIX}"
    assert block("pipeline-graph") == mermaid(ir), (
        f"the README's picture of the pipeline is stale: {FIX}"
    )


def test_the_exit_status_table_is_the_codes_statuses():
    """(tests/unit/test_exit_codes.py checks that it lists every status)"""
    assert block("exit-statuses") == readme.exit_statuses(), f"the exit statuses are stale: {FIX}"


def test_the_parameter_table_is_the_declared_parameters():
    from pipelines.parameters import markdown_table

    assert block("pipeline-parameters") == markdown_table(), f"the parameter table is stale: {FIX}"


def _task(name: str, deps=(), **extra) -> dict:
    return {
        "taskInfo": {"name": name},
        "componentRef": {"name": f"comp-{name}"},
        "dependentTasks": list(deps),
        **extra,
    }


def test_mermaid_draws_direct_dependencies_conditions_and_tasks_that_always_run():
    ir = {
        "root": {
            "dag": {
                "tasks": {
                    "group": _task("run"),
                    "last": _task(
                        "last",
                        ["group"],
                        triggerPolicy={"strategy": "ALL_UPSTREAM_TASKS_COMPLETED"},
                    ),
                }
            }
        },
        "components": {
            "comp-run": {
                "dag": {
                    "tasks": {
                        "c": _task("c", ["a", "b"]),
                        "b": _task("b", ["a"]),
                        "a": _task("a"),
                        "cond": _task("ok", ["c", "a"], triggerPolicy={"condition": "x == true"}),
                    }
                }
            },
            "comp-ok": {"dag": {"tasks": {"d": _task("d")}}},
            "comp-a": {},
            "comp-b": {},
            "comp-c": {},
            "comp-d": {},
            "comp-last": {},
        },
    }
    assert mermaid(ir).splitlines() == [
        "```mermaid",
        "flowchart LR",
        '  subgraph group ["run"]',
        '    a["a"]',
        '    b["b"]',
        '    c["c"]',
        '    subgraph cond ["if ok"]',
        '      d["d"]',
        "    end",
        "    a --> b",
        "    b --> c",
        "    c --> cond",  # a --> c and a --> cond: implied by longer paths
        "  end",
        '  last["last"]',
        "  group -.->|always, also after a failure| last",
        "```",
    ]
    assert task_names(ir) == ["run", "c", "b", "a", "ok", "d", "last"]


# --- links and size --------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _prose(path: Path) -> str:
    """The file without its fenced code blocks (a ``[x](y)`` in code is no link)."""
    return FENCE.sub("", path.read_text())


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", _prose(path), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n, candidate = 0, slug
        while candidate in anchors:  # repeated headings get -1, -2, ...
            n += 1
            candidate = f"{slug}-{n}"
        anchors.add(candidate)
    return anchors


def test_anchor_slugs_follow_githubs_rules(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(
        "# Quickstart (a fresh machine, Python ≥ 3.11)\n## On one machine (`make run`)\n"
        "## Notes\n## Notes\n```\n# not a heading\n```\n"
    )
    assert _anchors(page) == {
        "quickstart-a-fresh-machine-python--311",
        "on-one-machine-make-run",
        "notes",
        "notes-1",
    }


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(_prose(page)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(
                f"{target}: no {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}"
            )
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {dest.name}")
    assert broken == []


def test_the_readme_maps_every_docs_page():
    linked = {
        Path(t.partition("#")[0]).name
        for t in LINK.findall(_prose(README))
        if t.startswith("docs/")
    }
    assert sorted(p.name for p in (ROOT / "docs").glob("*.md")) == sorted(linked)


def test_the_readme_stays_a_front_page():
    size = len(README.read_bytes())
    assert size <= 12_000, (
        f"README.md is {size:,} bytes: move detail into docs/ (front page <= 12,000)"
    )


def test_the_readme_scores_a_day_the_sample_data_has():
    """A `--date` in the README's commands is a day `make data` (or one `make next-day`) writes."""
    import datetime as dt

    from components.datagen import DatagenConfig

    days = int(re.search(r"^DAYS \?= (\d+)$", (ROOT / "Makefile").read_text(), re.M).group(1))
    first = DatagenConfig(out="x").start_date
    written = {(first + dt.timedelta(days=i)).isoformat() for i in range(days + 1)}
    dates = re.findall(r"--date (\d{4}-\d{2}-\d{2})", README.read_text())
    assert dates and set(dates) <= written, (dates, min(written), max(written))


def _environment_reads() -> dict[str, str]:
    """Every environment variable the code reads -> a file reading it: names given to
    ``os.environ[...]``, ``.get``/``.setdefault``/``.pop``, ``os.getenv``, ``NAME in os.environ``,
    a ``PET_``/``KF_`` name read from an environment mapping, and every module constant ``*_ENV``."""
    import ast

    found: dict[str, str] = {}
    for package in ("components", "pipelines", "kube"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                    targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
                    if any(t.endswith("_ENV") for t in targets):
                        names.append(node.value.value)
                elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith(
                    "environ"
                ):
                    names.append(getattr(node.slice, "value", None))
                elif isinstance(node, ast.Call) and node.args:
                    call = ast.unparse(node.func)
                    reads = call.endswith(("environ.get", "environ.setdefault", "environ.pop"))
                    reads = reads or call.endswith("getenv")
                    first = getattr(node.args[0], "value", None)
                    if reads or (
                        call.endswith(".get") and isinstance(first, str) and first[:4] in ("PET_",)
                    ):
                        names.append(first)
                elif isinstance(node, ast.Compare) and "environ" in ast.unparse(
                    node.comparators[0]
                ):
                    names.append(getattr(node.left, "value", None))
                for name in names:
                    if isinstance(name, str) and re.fullmatch(r"[A-Z][A-Z0-9_]+", name):
                        found.setdefault(name, rel)
    return found


def test_every_environment_variable_the_code_reads_is_in_one_table():
    text = (ROOT / "docs" / "pipeline.md").read_text()
    table = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    documented = {n for row in rows for n in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}
    reads = _environment_reads()
    assert {"DAILYREC_ID_KEY", "KF_PIPELINES_TOKEN", "PET_NODE_RANK", "RANK"} <= set(reads)
    undocumented = {n: f for n, f in reads.items() if n not in documented}
    assert not undocumented, f"read but not in docs/pipeline.md's table: {undocumented}"
    # a row names what the code reads, or what a library reads for it (its "read by" says which)
    for row in rows:
        names = re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])
        by_library = any(
            lib in row.split("|")[2]
            for lib in ("MLflow's", "(kfp)", "torchrun", "torch.distributed")
        )
        stale = [n for n in names if n not in reads and not by_library]
        assert not stale, f"docs/pipeline.md's table names what no code reads: {stale}"
    # one table: no other document keeps a table of them
    for doc in DOCS:
        if doc.name != "pipeline.md":
            assert "| `DAILYREC_" not in doc.read_text(), doc


CITED = re.compile(
    r"(?<![\w/.-])((?:components|pipelines|kube|benchmarks|tests|docs|manifests|images|configs"
    r"|scripts)/[\w./-]*\w)"
)
"""A repository path as the code's prose cites it (a placeholder like `<stage>` ends it)."""


def _code_prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment of a Python file: where the code cites files."""
    import ast
    import io
    import tokenize

    source = path.read_text()
    found = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for stmt in body:  # docstrings, and the strings written under a field or constant
            value = getattr(stmt, "value", None) if isinstance(stmt, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.append((stmt.lineno, value.value))
    return found


def test_the_code_cites_files_that_exist():
    missing = []
    for package in ("components", "pipelines", "kube", "benchmarks", "tests"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "scratch" in path.relative_to(ROOT).parts:
                continue
            for line, text in _code_prose(path):
                for cited in CITED.findall(text):
                    written = cited.startswith("benchmarks/scratch")  # made at run time
                    if not written and not (ROOT / cited.rstrip(".")).exists():
                        missing.append(f"{path.relative_to(ROOT)}:{line} cites {cited}")
    assert not missing, "docstrings or comments name files that do not exist:\n" + "\n".join(
        missing
    )
