"""Helpers of the tests that start a TrainJob's nodes themselves."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def argv(job: dict) -> list[str]:
    trainer = job["spec"]["trainer"]
    return [*trainer["command"], *trainer["args"]]
