"""registration.json: one typed document, written and read by Registration only."""

from __future__ import annotations

import json

from components.common.registration import (
    REGISTRATION,
    REGISTRATION_FORMAT,
    Registration,
)

KEY = "ab" * 32


def test_a_written_record_reads_back_equal(tmp_path):
    written = Registration(
        "ctr",
        KEY,
        True,
        registered=True,
        version=4,
        aliases=("champion",),
        model_uri="models:/ctr/4",
        champion_version=4,
        previous_version=3,
        integrity={"dailyrec.manifest_sha256": "cd" * 32, "manifest": {"MLmodel": "ef" * 32}},
    )
    path = written.write(tmp_path)
    assert path == tmp_path / REGISTRATION
    doc = json.loads(path.read_text())
    assert doc["format"] == REGISTRATION_FORMAT and doc["aliases"] == ["champion"]
    read = Registration.read(tmp_path)
    assert read == written and read.source == path and Registration.read(path) == written


def test_one_line_for_a_person():
    moved = Registration(
        "ctr", KEY, True, registered=True, version=4, aliases=("champion",), champion_version=4,
        previous_version=3,
    )  # fmt: skip
    assert moved.line() == "ctr version 4, aliases champion; champion = v4, previous = v3"
    again = Registration("ctr", KEY, False, registered=True, version=5, reused=True,
                         champion_version=4)  # fmt: skip
    assert again.line() == "ctr version 5 (already registered), aliases none; champion = v4"
    refused = Registration("ctr", KEY, False, reason="not blessed")
    assert refused.line() == "ctr: nothing registered (not blessed)"
