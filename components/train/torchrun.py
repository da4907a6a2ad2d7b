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
* torchrun's ``--log-dir`` is always set (a temp folder unless given), so
  the ranks' error files (``errors.record`` in the trainer) can be read
  after it ends (:func:`rank_errors`);
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
import tempfile
from pathlib import Path

from components.common.cli import Exit, signal_exit

LOG_DIR_FLAGS = ("--log-dir", "--log_dir")


def log_dir(argv: list[str]) -> str | None:
    """torchrun's ``--log-dir`` in ``argv`` (either spelling, ``--flag DIR`` or ``--flag=DIR``)."""
    for flag in LOG_DIR_FLAGS:
        value = flag_value(argv, flag) or next(
            (a.split("=", 1)[1] for a in argv if a.startswith(flag + "=")), None
        )
        if value:
            return value
    return None


def rank_errors(logs: str | os.PathLike) -> list[dict]:
    """The failed ranks of the latest attempt under torchrun's log dir, from the error files
    ``torch.distributed.elastic.multiprocessing.errors.record`` writes
    (``<logs>/<run>/attempt_<n>/<local rank>/error.json``): rank, attempt, one-line error, retryable
    (a full disk, :class:`~components.common.storage.NoSpaceError`, is not)."""
    found = []
    for path in Path(logs).glob("*/attempt_*/*/error.json"):
        try:
            message = json.loads(path.read_text())["message"]
        except (OSError, ValueError, KeyError):
            continue
        text = message.get("message", "") if isinstance(message, dict) else str(message)
        kind, _, rest = text.partition(": ")
        found.append(
            {
                "rank": int(path.parent.name),
                "attempt": int(path.parent.parent.name.split("_")[1]),
                "error": rest if kind == "NoSpaceError" else text,
                "retryable": kind != "NoSpaceError",
            }
        )
    latest = max((e["attempt"] for e in found), default=0)
    return sorted((e for e in found if e["attempt"] == latest), key=lambda e: e["rank"])


def fatal_failure(logs: str | None) -> str | None:
    """The first rank error of the latest attempt that no restart can fix."""
    fatal = [e for e in rank_errors(logs) if not e["retryable"]] if logs else []
    return f"rank {fatal[0]['rank']}: {fatal[0]['error']}" if fatal else None


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

    logs = log_dir(sys.argv)
    if logs is None:  # torch's default is a fresh temp folder nobody can name afterwards
        logs = tempfile.mkdtemp(prefix="dailyrec-torchrun-")
        sys.argv.insert(1, f"--log-dir={logs}")
    try:
        torchrun_main()
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        print(
            f"torchrun: {exc.name} failed: rank {rank} exit code {failure.exitcode}",
            file=sys.stderr,
        )
        return Exit.NO_SPACE if failure.exitcode == Exit.NO_SPACE else Exit.FAILED
    except SignalException as exc:
        fatal = fatal_failure(logs)
        print(
            f"torchrun: stopped without restarting: {fatal}"
            if fatal
            else f"torchrun: stopped by {exc.sigval.name}",
            file=sys.stderr,
        )
        return Exit.NO_SPACE if fatal else signal_exit(exc.sigval)
    return Exit.OK


def exit_now(status: int) -> None:
    """End the process with ``status`` and nothing after it: a stopped agent's interpreter teardown
    can abort in torch's C++ threads ("terminate called without an active exception", status 134
    instead of 28), and the status is what the launcher and the TrainJob's podFailurePolicy read."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    exit_now(main())
