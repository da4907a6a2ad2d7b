"""What every ``python -m components.*`` / ``pipelines.*`` CLI shares: ``--help`` shows each flag's
help and its default."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default, or says it is required; a help text that already
    explains its default (``default: …``) is left as written (an environment variable's value, say,
    is not printed)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.required:
            return f"{text} (required)"
        if "default" in text.lower() or action.default is argparse.SUPPRESS or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


def cli_parser(prog: str, description: str, **kwargs) -> argparse.ArgumentParser:
    """An argument parser with :class:`HelpFormatter`; the description and any epilog keep their lines."""
    return argparse.ArgumentParser(prog=prog, description=description, formatter_class=HelpFormatter, **kwargs)
