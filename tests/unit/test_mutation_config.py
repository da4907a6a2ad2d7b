"""`make mutation`'s configuration stays valid: modules and their test files exist, settings parse."""

from __future__ import annotations

import subprocess
import tomllib

from benchmarks import mutation
from benchmarks.readme import ROOT


def test_every_module_and_its_tests_exist():
    names = [m.name for m in mutation.MODULES]
    assert len(names) == len(set(names))
    for module in mutation.MODULES:
        assert (ROOT / module.path).is_file(), module.path
        assert module.tests and all((ROOT / t).is_file() for t in module.tests), module.tests
        assert all(t.startswith("tests/unit/") for t in module.tests), "fast tests only"
        source = (ROOT / module.path).read_text()
        assert all(f"def {f}(" in source for f in module.functions), module.functions


def test_settings_select_one_module_and_its_tests():
    delong = next(m for m in mutation.MODULES if m.name == "delong")
    settings = tomllib.loads(mutation.mutmut_settings(delong))["tool"]["mutmut"]
    assert settings["only_mutate"] == ["components/evaluate/metrics.py"]
    assert settings["pytest_add_cli_args_test_selection"] == ["tests/unit/test_evaluate_metrics.py"]
    assert settings["process_isolation"] == "forkserver"
    assert delong.patterns() == [
        f"components.evaluate.metrics.x_{f}__mutmut_*"
        for f in ("_vectors", "_structural_components", "_sample_cov", "_paired", "_interval")
        + ("_iid_se", "delong", "clustered_delong", "clustered_auc", "detectable_effect")
    ]


def test_equivalent_mutants_name_known_modules_and_say_why():
    names = {m.name for m in mutation.MODULES}
    for (module, line), why in mutation.EQUIVALENT.items():
        assert module in names and line.strip() == line and len(why) > 10, (module, line)


def test_mutated_line_is_the_first_added_line_of_the_diff():
    diff = (
        "--- a.py\n+++ a.py\n@@ -1,2 +1,2 @@\n def f(x):\n-    return x >= 1\n+    return x > 1\n"
    )
    assert mutation.mutated_line(diff) == "return x > 1"
    assert mutation.mutated_line("") == ""


def test_table_reports_the_rate_over_non_equivalent_mutants():
    row = {
        "path": "components/x.py",
        "functions": "all",
        "what": "x",
        "mutants": 10,
        "killed": 8,
        "equivalent": 1,
        "kill_rate_non_equivalent": 8 / 9,
        "tests": ["tests/unit/test_x.py"],
        "seconds": 12.0,
        "meets_target": False,
    }
    text = mutation.table([row])
    assert "| `components/x.py` | x | 10 | 8 | 1 | 88.9% | `tests/unit/test_x.py` | 12 s |" in text
    assert text.endswith(
        "0 of 1 modules at >= 90% of non-equivalent mutants killed (`make mutation`; "
        "survivors and equivalents with reasons in benchmarks/results/mutation.json)."
    )


def test_mutants_get_every_tracked_file_and_no_generated_data():
    """mutmut copies ``also_copy`` once per module: benchmark worlds and caches stay out."""
    settings = tomllib.loads(mutation.mutmut_settings(mutation.MODULES[0]))["tool"]["mutmut"]
    copied = settings["also_copy"]
    assert copied == mutation.also_copy()
    assert all(not set(p.split("/")) & mutation.NOT_COPIED for p in copied), copied
    assert all((ROOT / p).exists() for p in copied)
    tracked = subprocess.run(
        ["git", "ls-files", *mutation.ALSO_COPY], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    assert tracked and all(any(t == p or t.startswith(p + "/") for p in copied) for t in tracked)
