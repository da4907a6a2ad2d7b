"""What every ``python -m components.*`` / ``pipelines.*`` CLI shares: ``--help`` shows each flag's
help and its default, and one set of exit statuses (:class:`Exit`, tabled in docs/development.md)."""

from __future__ import annotations

import argparse
import datetime as dt
import enum
import textwrap

from components.common.storage import NO_RETRY_EXIT, no_space


class Exit(enum.IntEnum):
    """The exit status of every CLI: a caller (a shell, ``make``, KFP, Kubernetes' pod failure
    policy) can tell a wrong request from a failed run without reading stderr."""

    OK = 0
    """Done (evaluate: also when the candidate is not blessed; the verdict is in
    ``decision.json``)."""
    FAILED = 1
    """The run started and could not finish: a stage or training error, a service (MLflow, the KFP
    API) unreachable, an output not writable, a lock held, a pipeline run that did not succeed."""
    USAGE = 2
    """Bad input or usage, nothing done: an argument, parameter, config or input file is missing,
    malformed, out of range or unknown, or a deadline no plan can meet (argparse's own status for
    a bad command line)."""
    NO_SPACE = NO_RETRY_EXIT
    """A write failed on a full disk: a restart cannot help (torchrun and the TrainJob's pod failure
    policy do not retry it)."""


def signal_exit(signum: int) -> int:
    """The status of a run stopped by signal ``signum``: 128 + N, as a shell reports it.

    Stopped by signal N: the commands that start processes (``pipelines.local``, the torchrun
    wrapper, ``serve``) stop them first; the stages that record an MLflow run (train, evaluate,
    register) end it KILLED (``components/common/stop.py``).
    """
    return 128 + int(signum)


def exit_for(exc: BaseException) -> Exit:
    """The status for an error a CLI caught: the project's bad-input errors subclass ``ValueError``
    (a config's ``__post_init__``, ``InputError``, ``DatasetError``, ``ParameterError``...), its
    run failures ``RuntimeError`` or ``OSError``."""
    if no_space(exc) or getattr(exc, "exit_status", None) == Exit.NO_SPACE:  # a child's full disk
        return Exit.NO_SPACE
    return Exit.USAGE if isinstance(exc, ValueError) else Exit.FAILED


EXIT_EPILOG = (
    "exit status: 0 done; 1 the run failed; 2 bad input or usage; 28 a full disk (no retry); "
    "128+N stopped by signal N."
)
"""Ends every CLI's ``--help`` (:func:`cli_parser`)."""


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, or says it is required; a help text that already
    explains its default (``default: …``) is left as written (an environment variable's value, say,
    is not printed). Descriptions and epilogs keep their line breaks (each line is wrapped)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = (
            (action.help or "").rstrip().removesuffix(".")
        )  # a config field's docstring is a sentence
        if action.required:
            return f"{text} (required)"
        if (
            "default" in text.lower()
            or action.default is argparse.SUPPRESS
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)"

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = []
        for line in text.splitlines():
            hanging = indent + " " * (len(line) - len(line.lstrip()))
            lines.append(
                textwrap.fill(
                    line.strip(),
                    width,
                    initial_indent=hanging,
                    subsequent_indent=hanging,
                    break_on_hyphens=False,
                )
                if line.strip()
                else ""
            )
        return "\n".join(lines)


def cli_parser(
    prog: str, description: str, epilog: str = "", parser_class: type = argparse.ArgumentParser
) -> argparse.ArgumentParser:
    """An argument parser with :class:`HelpFormatter` and the exit statuses as the last lines of its
    help; the description and any epilog keep their lines."""
    return parser_class(
        prog=prog,
        description=description,
        epilog=f"{epilog}\n\n{EXIT_EPILOG}" if epilog else EXIT_EPILOG,
        formatter_class=HelpFormatter,
    )


def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a (config) dataclass, by field name: a CLI's flags take their help
    from the config they fill, so each option is described once."""
    import ast
    import inspect
    import textwrap

    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    docs = {}
    for node, after in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def iso_date(text: str) -> dt.date:
    """A ``YYYY-MM-DD`` flag value; anything else is a usage error that names the text."""
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date YYYY-MM-DD: {text!r}") from None


def add_config_flags(
    parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = ()
) -> None:
    """One ``--field-name`` flag per field of a config dataclass (those in ``skip`` aside): its
    type, default and help come from the field (``metadata={"choices": ...}`` gives choices), so a
    setting declared on the config is on its CLI. A field without a default is a required flag; a
    bool field defaulting to False is a switch, one defaulting to None a ``--x/--no-x`` pair;
    ``X | None`` takes an X; a date takes ``YYYY-MM-DD``. A field needing another parse (a list,
    JSON) goes in ``skip`` and gets a hand-written flag."""
    import dataclasses
    import typing

    parsers = {str: str, int: int, float: float, dt.date: iso_date}
    hints = typing.get_type_hints(cls)
    # argparse %-formats help texts: a docstring's "12%" is literal
    docs = {name: doc.replace("%", "%%") for name, doc in field_docs(cls).items()}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag, kind = f"--{f.name.replace('_', '-')}", hints[f.name]
        kinds = [k for k in typing.get_args(kind) if k is not type(None)] or [kind]
        if kinds == [bool] and f.default in (False, None):
            action = "store_true" if f.default is False else argparse.BooleanOptionalAction
            parser.add_argument(flag, action=action, default=f.default, help=docs.get(f.name))
            continue
        if len(kinds) != 1 or kinds[0] not in parsers:
            raise TypeError(f"{cls.__name__}.{f.name}: no flag for type {kind}")
        if f.default_factory is not dataclasses.MISSING:  # made per instance: no default to show
            raise TypeError(f"{cls.__name__}.{f.name}: a default_factory field needs its own flag")
        required = f.default is dataclasses.MISSING
        parser.add_argument(
            flag,
            type=parsers[kinds[0]],
            required=required,
            default=None if required else f.default,
            choices=f.metadata.get("choices"),
            help=docs.get(f.name),
        )
