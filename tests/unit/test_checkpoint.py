"""Checkpoints: a failed write never costs the previous checkpoint; loads are safe and say why not."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
import torch

from components.train import checkpoint
from components.train.checkpoint import (
    BEST,
    CHECKPOINT_FORMAT,
    LAST,
    PREVIOUS,
    CheckpointError,
    load_checkpoint,
    load_resumable,
    save_checkpoint,
    save_rotating,
    shape_mismatches,
)


def state(epoch: int) -> dict:
    return {"model": {"w": torch.full((3,), float(epoch))}, "epoch": epoch}


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in (LAST, PREVIOUS, BEST))


def test_file_names_and_format_are_the_documented_ones():
    assert (BEST, LAST, PREVIOUS) == ("best.pt", "last.pt", "last.prev.pt")
    assert CHECKPOINT_FORMAT == "dailyrec.checkpoint/v1"


def test_a_write_that_dies_half_way_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    path = tmp_path / LAST
    assert save_checkpoint(path, state(1)) == path
    before = path.read_bytes()
    real_save = torch.save

    def dies_half_way(obj, f, *args, **kwargs):
        """Serializes for real, writes half of the bytes where it was told to, then fails."""
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        data = buffer.getvalue()
        if isinstance(f, (str, os.PathLike)):
            with open(f, "wb") as fh:
                fh.write(data[: len(data) // 2])
        else:
            f.write(data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(OSError, match="No space left on device"):
        save_checkpoint(path, state(2))
    monkeypatch.undo()
    assert path.read_bytes() == before
    loaded = load_checkpoint(path)
    assert loaded["epoch"] == 1 and torch.equal(loaded["model"]["w"], torch.ones(3))
    assert leftovers(tmp_path) == []


def test_a_failed_fsync_or_rename_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    path = tmp_path / LAST
    save_checkpoint(path, state(1))
    for target in ("fsync", "replace"):

        def fails(*args, target=target, **kwargs):
            raise OSError(5, f"{target} failed")

        with monkeypatch.context() as patch:
            patch.setattr(os, target, fails)
            with pytest.raises(OSError, match=f"{target} failed"):
                save_checkpoint(path, state(2))
        assert load_checkpoint(path)["epoch"] == 1
        assert leftovers(tmp_path) == []


def test_saved_checkpoint_round_trips_with_its_format_tag(tmp_path):
    path = save_checkpoint(tmp_path / "sub" / BEST, state(4))
    raw = torch.load(path, weights_only=True)
    assert raw["format"] == CHECKPOINT_FORMAT and raw["epoch"] == 4
    loaded = load_checkpoint(path, map_location="cpu")
    assert loaded["model"]["w"].device.type == "cpu" and torch.equal(
        loaded["model"]["w"], torch.full((3,), 4.0)
    )


def test_rotation_keeps_exactly_the_one_before(tmp_path):
    save_rotating(tmp_path, state(1))
    assert sorted(p.name for p in tmp_path.iterdir()) == [LAST]
    save_rotating(tmp_path, state(2))
    save_rotating(tmp_path, state(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([LAST, PREVIOUS])
    assert load_checkpoint(tmp_path / LAST)["epoch"] == 3
    assert load_checkpoint(tmp_path / PREVIOUS)["epoch"] == 2


def test_resume_prefers_last_then_falls_back_to_previous(tmp_path):
    assert load_resumable(tmp_path) is None
    save_rotating(tmp_path, state(1))
    save_rotating(tmp_path, state(2))
    loaded, path, problems = load_resumable(tmp_path)
    assert (loaded["epoch"], path, problems) == (2, tmp_path / LAST, [])
    (tmp_path / LAST).write_bytes(b"PK\x03\x04 truncated")
    loaded, path, problems = load_resumable(tmp_path)
    assert (loaded["epoch"], path) == (1, tmp_path / PREVIOUS)
    (problem,) = problems
    assert problem.startswith(f"{tmp_path / LAST}: unreadable or corrupt checkpoint (")
    (tmp_path / LAST).unlink()
    loaded, path, problems = load_resumable(tmp_path)
    assert (loaded["epoch"], path, problems) == (1, tmp_path / PREVIOUS, [])


def test_resume_names_every_unusable_file(tmp_path):
    (tmp_path / LAST).write_bytes(b"garbage")
    torch.save({"format": "someone-else/v3"}, tmp_path / PREVIOUS)
    with pytest.raises(CheckpointError, match=r"^no usable checkpoint to resume from: ") as info:
        load_resumable(tmp_path)
    message = str(info.value)
    assert message.startswith(
        f"no usable checkpoint to resume from: {tmp_path / LAST}: unreadable or corrupt"
    )
    assert message.endswith(f"; {tmp_path / PREVIOUS}: not a dailyrec.checkpoint/v1 checkpoint")


def test_load_errors_name_the_file_and_the_first_line_of_the_cause(tmp_path, monkeypatch):
    missing = tmp_path / "missing.pt"
    with pytest.raises(CheckpointError, match=r"missing\.pt: checkpoint not found$"):
        load_checkpoint(missing)
    (tmp_path / "dir.pt").mkdir()
    with pytest.raises(CheckpointError, match=r"dir\.pt: checkpoint not found$"):
        load_checkpoint(tmp_path / "dir.pt")
    path = save_checkpoint(tmp_path / LAST, state(1))
    for message, shown in (("x" * 300 + "\nsecond line", "x" * 200), ("", ""), ("  \n", "")):
        with monkeypatch.context() as patch:

            def fails(*args, message=message, **kwargs):
                raise RuntimeError(message)

            patch.setattr(checkpoint.torch, "load", fails)
            with pytest.raises(CheckpointError, match="unreadable or corrupt checkpoint") as info:
                load_checkpoint(path)
        assert (
            str(info.value) == f"{path}: unreadable or corrupt checkpoint (RuntimeError: {shown})"
        )
        assert isinstance(info.value.__cause__, RuntimeError)


def test_load_refuses_what_is_not_a_dailyrec_checkpoint(tmp_path):
    torch.save([1, 2, 3], tmp_path / "list.pt")
    torch.save({"epoch": 1}, tmp_path / "untagged.pt")
    for name in ("list.pt", "untagged.pt"):
        with pytest.raises(
            CheckpointError, match=rf"{name}: not a dailyrec\.checkpoint/v1 checkpoint$"
        ):
            load_checkpoint(tmp_path / name)


def test_load_is_weights_only(tmp_path):
    class Code:
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"format": CHECKPOINT_FORMAT, "x": Code()}, tmp_path / "code.pt")
    with pytest.raises(
        CheckpointError, match=r"code\.pt: unreadable or corrupt checkpoint \(UnpicklingError"
    ):
        load_checkpoint(tmp_path / "code.pt")


def test_shape_mismatches_in_order_and_none_when_compatible():
    model = {"a": torch.zeros(2, 3), "b": torch.zeros(4), "c": torch.zeros(1)}
    target = {"a": torch.zeros(3, 3), "c": torch.zeros(1), "d": torch.zeros(5)}
    assert shape_mismatches(model, target) == [
        "d: missing in checkpoint",
        "b: not in this model",
        "a: checkpoint (2, 3) vs model (3, 3)",
    ]
    assert shape_mismatches(model, dict(model)) == []


def test_weights_only_is_explicit_so_the_environment_cannot_relax_it(tmp_path, monkeypatch):
    """torch lets $TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD turn full unpickling back on for calls that
    leave weights_only unset: the loader must pass it explicitly."""
    marker = tmp_path / "code-ran"

    class Code:
        def __reduce__(self):
            return (Path.touch, (marker,))

    torch.save({"format": CHECKPOINT_FORMAT, "x": Code()}, tmp_path / "code.pt")
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(
        CheckpointError, match=r"code\.pt: unreadable or corrupt checkpoint \(UnpicklingError"
    ):
        load_checkpoint(tmp_path / "code.pt")
    assert not marker.exists()


def test_map_location_is_honoured_by_load_and_resume(tmp_path):
    save_rotating(tmp_path, state(1))
    assert load_checkpoint(tmp_path / LAST, map_location="meta")["model"]["w"].device.type == "meta"
    loaded, _, _ = load_resumable(tmp_path, map_location="meta")
    assert loaded["model"]["w"].device.type == "meta"
    assert load_checkpoint(tmp_path / LAST)["model"]["w"].device.type == "cpu"  # the default
