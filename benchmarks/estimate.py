"""Benchmark: dailyrec's memory estimator vs a rule of thumb, against measured training memory.

For the ``debug``, ``local`` and ``prod`` configs at their REFERENCE_VOCAB sizes,
at three micro-batch sizes each, on this CPU:

* measured: one real training step of the real model as the trainer runs it on
  CPU (sparse item/user tables with SparseAdam + fused AdamW, fp32, 1 thread),
  after a warm-up step that creates the optimizer state: parameter + gradient +
  optimizer tensor bytes + the bytes autograd saves for backward (unique
  storages, via ``saved_tensors_hooks``) — components/estimate/probe.py. The
  batches are synthetic full histories (no padding: the sparse-gradient worst case).
* dailyrec: ``memory_breakdown(...)["tensors"]`` (weights + gradients + optimizer
  + activations; the loader and workspace terms are left out on both sides, the
  probe method cannot see them).
* rule of thumb: ``params × 4 B × 3.5 + seq_len × batch × features × 4 B`` with
  seq_len = the history length L and features = d_model.

Errors are (predicted − measured) / measured. Writes benchmarks/results/estimate.json
and the README block between ``<!-- bench:estimate:start/end -->``.

    python benchmarks/estimate.py                      # the real benchmark (~minutes)
    python benchmarks/estimate.py --quick --no-readme  # seconds, for smoke tests
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.measure import machine  # noqa: E402
from benchmarks.readme import publish  # noqa: E402
from components.estimate.memory import MemorySetup, memory_breakdown, rule_of_thumb_bytes  # noqa: E402
from components.estimate.probe import ProbeRunner  # noqa: E402
from components.train.model import NAMED_CONFIGS, REFERENCE_VOCAB, Vocab, count_parameters  # noqa: E402

NAME = "estimate"
TARGET = 0.15
FULL = {"debug": (256, 1024, 4096), "local": (256, 1024, 4096), "prod": (256, 1024, 2048)}
QUICK = {"debug": (16, 64, 128)}
QUICK_VOCAB = Vocab(item=4096, category=64, user=2048, gap=16, seq_len=20)


def measure_config(name: str, vocab: Vocab, batches: tuple[int, ...]) -> list[dict]:
    config = NAMED_CONFIGS[name]
    params = count_parameters(config, vocab)["total"]
    runner = ProbeRunner(config, vocab, sparse=True, precision="fp32", device="cpu")
    rows = []
    for batch in batches:
        start = time.perf_counter()
        measured = runner.measure(batch)
        seconds = time.perf_counter() - start
        predicted = memory_breakdown(MemorySetup(config=config, vocab=vocab, micro_batch=batch,
                                                 sparse=True, device="cpu"))["tensors"]["total"]
        rule = rule_of_thumb_bytes(params, vocab.seq_len, batch, config.d_model)
        rows.append({
            "config": name, "micro_batch": batch, "parameters": params,
            "vocab": {"item": vocab.item, "user": vocab.user, "category": vocab.category,
                      "seq_len": vocab.seq_len},
            "measured_bytes": measured["total"], "measured_parts": measured,
            "dailyrec_bytes": predicted, "dailyrec_error": (predicted - measured["total"]) / measured["total"],
            "rule_of_thumb_bytes": rule, "rule_of_thumb_error": (rule - measured["total"]) / measured["total"],
            "step_seconds": round(seconds, 2),
        })
        print(f"{name:6s} micro {batch:5d}: measured {measured['total'] / 2**20:8.1f} MiB  "
              f"dailyrec {predicted / 2**20:8.1f} MiB ({rows[-1]['dailyrec_error']:+.1%})  "
              f"rule {rule / 2**20:8.1f} MiB ({rows[-1]['rule_of_thumb_error']:+.1%})", flush=True)
    return rows


def readme_table(result: dict) -> str:
    lines = [f"Peak training memory per process, predicted vs measured (`python benchmarks/estimate.py`, "
             f"{result['machine'].get('cpu_model', 'CPU')}, fp32, sparse item/user tables, 1 thread). "
             "Measured = parameter + gradient + optimizer tensors + bytes saved for backward; "
             "rule of thumb = params x 4 B x 3.5 + L x batch x d_model x 4 B.",
             "",
             "| config | micro-batch | measured | dailyrec | error | rule of thumb | error |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['config']} | {r['micro_batch']} | {r['measured_bytes'] / 2**20:,.1f} MiB | "
                     f"{r['dailyrec_bytes'] / 2**20:,.1f} MiB | {r['dailyrec_error']:+.1%} | "
                     f"{r['rule_of_thumb_bytes'] / 2**20:,.1f} MiB | {r['rule_of_thumb_error']:+.1%} |")
    s = result["summary"]
    lines += ["", f"Max |error|: dailyrec {s['dailyrec_max_abs_error']:.1%}, rule of thumb "
                  f"{s['rule_of_thumb_max_abs_error']:.1%} (target: dailyrec within ±{TARGET:.0%})."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/estimate.py", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="debug config, small vocab and batches (seconds)")
    p.add_argument("--no-readme", action="store_true")
    p.add_argument("--results", default=None, help="where to write the JSON (default benchmarks/results)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # 2 intra-op threads are ~60x slower on the 2-vCPU VM
    plan = QUICK if args.quick else FULL
    rows = []
    for name, batches in plan.items():
        vocab = QUICK_VOCAB if args.quick else REFERENCE_VOCAB[name]
        rows += measure_config(name, vocab, batches)
    summary = {
        "dailyrec_max_abs_error": max(abs(r["dailyrec_error"]) for r in rows),
        "rule_of_thumb_max_abs_error": max(abs(r["rule_of_thumb_error"]) for r in rows),
        "target_abs_error": TARGET,
    }
    summary["within_target"] = summary["dailyrec_max_abs_error"] <= TARGET
    result = {"benchmark": NAME, "quick": args.quick, "machine": machine(), "rows": rows,
              "summary": summary, "features_in_rule_of_thumb": "d_model",
              "seq_len_in_rule_of_thumb": "history length L"}
    publish(NAME, result, readme_table(result), args.results, throwaway=args.quick, readme=not args.no_readme)
    print(f"max |error|: dailyrec {summary['dailyrec_max_abs_error']:.1%}, "
          f"rule of thumb {summary['rule_of_thumb_max_abs_error']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
