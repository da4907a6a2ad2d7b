"""``python -m pipelines.compile [--out build/pipeline.yaml]``: the pipeline as KFP IR YAML."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kfp import compiler

from pipelines.daily import daily

DEFAULT_OUT = "build/pipeline.yaml"


def compile_pipeline(out: str | Path = DEFAULT_OUT) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.yaml")
    compiler.Compiler().compile(pipeline_func=daily, package_path=str(tmp))
    tmp.replace(out)  # never a half-written pipeline for `make deploy` to upload
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipelines.compile", description=__doc__)
    p.add_argument("--out", default=DEFAULT_OUT)
    args = p.parse_args(argv)
    print(f"compiled {compile_pipeline(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
