"""registration.json: one typed document, written and read by Registration only."""

from __future__ import annotations

import json

import pytest

from components.common.registration import (
    REGISTRATION,
    REGISTRATION_FORMAT,
    REQUIRED,
    Registration,
    RegistrationError,
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


def test_a_record_of_another_format_or_missing_a_field_is_refused_by_name(tmp_path):
    doc = Registration("ctr", KEY, False).to_document()
    path = tmp_path / REGISTRATION
    path.write_text(json.dumps({k: v for k, v in doc.items() if k != "format"}))
    with pytest.raises(RegistrationError, match=rf"{path}: format is None"):
        Registration.read(tmp_path)
    for name in REQUIRED:
        path.write_text(json.dumps({k: v for k, v in doc.items() if k != name}))
        with pytest.raises(RegistrationError, match=rf"{path}: no '{name}' field"):
            Registration.read(path)
    with pytest.raises(RegistrationError, match="register did not run"):
        Registration.read(tmp_path / "elsewhere")


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
