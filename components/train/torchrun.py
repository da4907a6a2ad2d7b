"""``torchrun``, as the launchers run it: ``python -m components.train.torchrun [torchrun flags] --module
components.train [trainer flags]`` (locally and in a TrainJob's pods).

The same as torchrun, except:

* the workers' thread variables (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``)
  are set from the plan's ``cpu_threads`` unless given, so torchrun does not
  choose them with a banner on every launch;
* a failed worker ends it with one line instead of a Python traceback of
  ChildFailedError (which buried the ranks' own one-line errors that the
  launcher's LaunchError carries);
* workers get their own store per rendezvous round: with the agent's shared
  store (torch's default), restarted workers can read the dead workers' gloo
  addresses and hang in init_process_group (pytorch/pytorch#135712; measured
  here: 2 of 3 restarts hung);
* a rank that failed on something a restart cannot fix (a full disk) stops the
  agent with SIGTERM (:func:`components.train.trainer.refuse_restart`):
  torchrun then ends without restarting, and this process exits with
  :data:`~components.common.storage.NO_RETRY_EXIT`, the exit code the
  TrainingRuntime's podFailurePolicy turns into "fail, do not restart".
"""

from __future__ import annotations

import json
import os
import sys

from components.common.storage import NO_RETRY_EXIT, rank_reports


def fatal_failure(argv: list[str]) -> str | None:
    """The first rank error that no restart can fix (``retryable: false``) under the trainer's ``--out``."""
    out = flag_value(argv, "--out")
    for path in rank_reports(out) if out else []:
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if report.get("retryable") is False:
            return f"rank {report.get('rank')}: {report.get('error')}"
    return None


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def thread_count(argv: list[str]) -> int:
    """Intra-op threads per worker: the trainer's ``--plan`` ``cpu_threads``, else 1 (torchrun's own choice)."""
    path = flag_value(argv, "--plan")
    if path:
        from components.common.plan import read_plan

        try:
            return read_plan(path)[0].cpu_threads
        except ValueError:
            pass  # the trainer reports a bad plan itself, naming the file
    return 1


def flag_value(argv: list[str], flag: str) -> str | None:
    return next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag), None)


def main() -> int:
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    # set explicitly, torchrun prints a 4-line banner about choosing OMP_NUM_THREADS=1 for us
    threads = str(thread_count(sys.argv))
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, threads)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    try:
        torchrun_main()
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        print(f"torchrun: {exc.name} failed: rank {rank} exit code {failure.exitcode}", file=sys.stderr)
        return NO_RETRY_EXIT if failure.exitcode == NO_RETRY_EXIT else 1
    except SignalException as exc:
        fatal = fatal_failure(sys.argv)
        print(f"torchrun: stopped without restarting: {fatal}" if fatal else f"torchrun: stopped by {exc.sigval.name}",
              file=sys.stderr)
        return NO_RETRY_EXIT if fatal else 128 + exc.sigval
    return 0


if __name__ == "__main__":
    sys.exit(main())
