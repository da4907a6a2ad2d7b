"""The resolve-window task's checks (pipelines/window.py)."""

import pytest

from pipelines.window import check_unchanged


def test_a_dataset_of_the_resolved_files_is_accepted():
    check_unchanged("a" * 64, "a" * 64, "/data/datasets/2026-01-14-aaaa")


def test_files_that_changed_after_the_window_was_resolved_are_refused_naming_the_dataset():
    with pytest.raises(RuntimeError) as raised:
        check_unchanged("b" * 64, "a" * 64, "/data/datasets/2026-01-14-aaaa")
    message = str(raised.value)
    assert message.startswith("/data/datasets/2026-01-14-aaaa: fingerprint bbbbbbbbbbbb")
    assert "resolved aaaaaaaaaaaa" in message and "changed during the run" in message
