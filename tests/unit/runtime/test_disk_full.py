"""A full disk says so: the atomic writer turns ENOSPC / EDQUOT (and torch.save's wordless
``basic_ios`` failure on a full filesystem) into DiskFullError naming the path and the space
left, and leaves no partial or temporary file behind."""

from __future__ import annotations

import errno
import os
import pathlib
import shutil
from pathlib import Path

import pytest
import torch

from presdep.contracts.errors import DiskFullError, PresdepError
from presdep.contracts.schemas import atomic_write, write_bytes_atomic, write_text_atomic


def _full_write(code: int = errno.ENOSPC):
    """A Path.write_bytes that writes half the data (a torn temp file), then fails like a full disk."""

    def write_bytes(self: Path, data: bytes) -> int:
        with open(self, "wb") as fh:
            fh.write(data[: len(data) // 2])
        raise OSError(code, os.strerror(code))

    return write_bytes


def _free(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    real = shutil.disk_usage

    def disk_usage(path):
        u = real(path)
        return type(u)(u.total, u.total - free, free)

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)


def _nothing_left(folder: Path, keep: tuple[str, ...] = ()) -> None:
    assert sorted(p.name for p in folder.iterdir()) == sorted(keep)


def test_enospc_names_the_path_the_free_space_and_the_fix_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(pathlib.Path, "write_bytes", _full_write())
    _free(monkeypatch, 3 * 1024 * 1024)
    target = tmp_path / "out" / "table.bin"
    with pytest.raises(DiskFullError) as info:
        write_bytes_atomic(target, b"x" * 4096)
    err = info.value
    msg = str(err)
    assert msg.startswith(f"{target}: could not be written: no space left on device (ENOSPC); "
                          "3.0 MiB free on that filesystem; free space there and re-run"), msg
    assert isinstance(err, PresdepError) and isinstance(err, OSError)
    assert (err.errno, err.path, err.free_bytes) == (errno.ENOSPC, str(target), 3 * 1024 * 1024)
    assert isinstance(err.__cause__, OSError) and err.__cause__.errno == errno.ENOSPC
    _nothing_left(target.parent)


def test_an_old_file_survives_a_full_disk(tmp_path, monkeypatch):
    target = tmp_path / "report.md"
    write_text_atomic(target, "old\n")
    monkeypatch.setattr(pathlib.Path, "write_bytes", _full_write())
    with pytest.raises(DiskFullError, match=r"report\.md: could not be written"):
        write_bytes_atomic(target, b"new" * 100)
    assert target.read_text() == "old\n"
    _nothing_left(tmp_path, keep=("report.md",))


def test_a_spent_quota_says_edquot(tmp_path, monkeypatch):
    monkeypatch.setattr(pathlib.Path, "write_bytes", _full_write(errno.EDQUOT))
    with pytest.raises(DiskFullError, match=r"disk quota exceeded \(EDQUOT\); .* free on that filesystem; "
                                            r"free space \(or raise the quota\) and re-run") as info:
        write_bytes_atomic(tmp_path / "q.bin", b"x" * 10)
    assert info.value.errno == errno.EDQUOT
    _nothing_left(tmp_path)


def test_a_writer_that_drops_the_errno_but_says_no_space_is_caught(tmp_path):
    """polars raises OSError('No space left on device (os error 28)') with no errno, or ComputeError."""

    def polars_like(tmp: Path) -> None:
        tmp.write_bytes(b"partial")
        raise OSError("No space left on device (os error 28)")

    with pytest.raises(DiskFullError, match=r"data\.parquet: could not be written: no space left"):
        atomic_write(tmp_path / "data.parquet", polars_like)
    _nothing_left(tmp_path)


def test_torch_saves_wordless_error_on_a_full_filesystem_becomes_disk_full(tmp_path, monkeypatch):
    _free(monkeypatch, 0)

    def torch_like(tmp: Path) -> None:
        tmp.write_bytes(b"PK partial")
        raise RuntimeError("basic_ios::clear: iostream error")

    with pytest.raises(DiskFullError, match=r"trainer\.pt: could not be written: no space left on device \(ENOSPC\); "
                                            r"0 bytes free on that filesystem; free space there and re-run "
                                            r"\[RuntimeError: basic_ios::clear: iostream error\]"):
        atomic_write(tmp_path / "trainer.pt", torch_like)
    _nothing_left(tmp_path)


def test_other_failures_pass_through_unchanged(tmp_path, monkeypatch):
    def broken(tmp: Path) -> None:
        tmp.write_bytes(b"partial")
        raise RuntimeError("basic_ios::clear: iostream error")

    _free(monkeypatch, 10**9)  # space left: not a full disk, keep the writer's own error
    with pytest.raises(RuntimeError, match="basic_ios") as info:
        atomic_write(tmp_path / "a.pt", broken)
    assert not isinstance(info.value, DiskFullError)

    def bad_value(tmp: Path) -> None:
        raise ValueError("not a disk problem")

    _free(monkeypatch, 0)
    with pytest.raises(ValueError, match="not a disk problem") as info:
        atomic_write(tmp_path / "b.pt", bad_value)
    assert not isinstance(info.value, DiskFullError)
    _nothing_left(tmp_path)


def test_a_checkpoint_on_a_full_disk_raises_disk_full_and_leaves_no_step_folder(tmp_path, monkeypatch):
    from presdep.training import checkpoints

    monkeypatch.setattr(checkpoints, "save_adapter", lambda model, out: Path(out).mkdir(parents=True))
    monkeypatch.setattr(checkpoints, "adapter_state", lambda model: {})
    real_save = torch.save

    def full_save(obj, f, *args, **kwargs):
        real_save(obj, f, *args, **kwargs)  # the bytes land (partly, on a real disk), then the stream fails
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(torch, "save", full_save)
    _free(monkeypatch, 0)
    param = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([param], lr=0.1)
    with pytest.raises(DiskFullError, match=r"trainer\.pt: could not be written: no space left on device") as info:
        checkpoints.write_checkpoint(tmp_path, 3, object(), opt, [], [])
    assert "unexpected pos" in str(info.value)
    _nothing_left(tmp_path / "checkpoints")


# ------------------------------------------------------------------ folder writers (save_pretrained)

def _tiny_peft_model():
    from scorers_tiny import char_tokenizer

    from presdep.training.lora import add_lora, tiny_causal_lm

    spec = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
    return add_lora(tiny_causal_lm(char_tokenizer(), 0, hidden=64), spec, seed=1)  # adapter ~40 KB


@pytest.fixture
def tiny_filesystem(tmp_path):
    """A real 16 KiB tmpfs: writes into it fail with the kernel's own ENOSPC (skipped where mount is not allowed)."""
    import subprocess

    mnt = tmp_path / "full"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode(errors='replace').strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_an_adapter_on_a_really_full_filesystem_says_enospc(tiny_filesystem):
    from presdep.contracts.schemas import write_dir_atomic
    from presdep.training.lora import save_adapter

    model = _tiny_peft_model()
    target = tiny_filesystem / "adapter"
    with pytest.raises(DiskFullError, match=r"adapter: could not be written: no space left on device \(ENOSPC\); "
                                            r".* free on that filesystem; free space there and re-run") as info:
        write_dir_atomic(target, lambda tmp: save_adapter(model, tmp))
    assert info.value.path == str(target)
    _nothing_left(tiny_filesystem)  # no half-written adapter, no temporary folder


def test_save_pretrained_failures_name_the_folder_and_keep_the_old_one(tmp_path, monkeypatch):
    """safetensors' Rust error (its text, as a full disk gives it) and a tokenizer's OSError both become DiskFullError."""
    import peft.peft_model
    from safetensors import SafetensorError

    from presdep.contracts.schemas import write_dir_atomic
    from presdep.runtime import models
    from presdep.training.lora import save_adapter

    model = _tiny_peft_model()
    target = tmp_path / "adapter"
    write_dir_atomic(target, lambda tmp: save_adapter(model, tmp))
    before = {p.name: p.read_bytes() for p in target.iterdir()}

    def full_safetensors(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"partial")
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(peft.peft_model, "safe_save_file", full_safetensors)
    with pytest.raises(DiskFullError, match=r"adapter: could not be written: no space left on device \(ENOSPC\)"):
        write_dir_atomic(target, lambda tmp: save_adapter(model, tmp))
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    _nothing_left(tmp_path, keep=("adapter",))

    class FullTokenizer:
        def save_pretrained(self, d):
            (Path(d) / "tokenizer.json").write_text("{")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(Path(d) / "tokenizer.json"))

    with pytest.raises(DiskFullError, match=r"model: could not be written: no space left on device \(ENOSPC\)"):
        models._save_model_dir(model.get_base_model(), FullTokenizer(), tmp_path / "model")
    _nothing_left(tmp_path, keep=("adapter",))
