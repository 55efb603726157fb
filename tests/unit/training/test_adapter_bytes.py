"""A saved LoRA adapter is byte-identical for identical weights, whatever the process.

The adapter folder's hash is the student's identity in the read cache, so any byte that
varies between two saves of the same weights makes a retrained student re-read its prompts.
peft writes ``target_modules`` (a set) in hash order, which follows PYTHONHASHSEED, names the
base model's local folder in ``adapter_config.json`` and adds a model card; safetensors writes
its ``__metadata__`` map in a per-process random order. ``save_adapter`` normalises all of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from presdep.runtime.hashing import weights_sha256
from presdep.training.lora import _canonical_safetensors, canonicalise_adapter_dir

REPO = Path(__file__).resolve().parents[3]

# One process: a tiny random base model saved to (and reloaded from) its own folder, so the base
# path differs per process as it does per checkout, then LoRA on every projection; the adapter is
# saved twice: peft's raw save_pretrained and presdep's save_adapter.
SCRIPT = r"""
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from scorers_tiny import char_tokenizer
from presdep.training.lora import add_lora, save_adapter, tiny_causal_lm

out = Path(sys.argv[1])
tok = char_tokenizer()
tiny_causal_lm(tok, 0, hidden=32).save_pretrained(out / "base")
base = AutoModelForCausalLM.from_pretrained(out / "base", dtype=torch.float32)
spec = {"r": 2, "alpha": 4, "dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
model = add_lora(base, spec, seed=1)
model.save_pretrained(str(out / "raw"), safe_serialization=True)
save_adapter(model, out / "adapter")
"""


def _save_in_process(out: Path, hash_seed: int) -> Path:
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed),
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], check=False, env=env, cwd=str(out.parent),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def two_saves(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return _save_in_process(root / "seed1", 1), _save_in_process(root / "seed2", 2)


def test_raw_peft_save_differs_between_hash_seeds(two_saves):
    """The bug this guards against: without normalising, the same weights save differently."""
    a, b = two_saves
    ca = json.loads((a / "raw" / "adapter_config.json").read_text())
    cb = json.loads((b / "raw" / "adapter_config.json").read_text())
    assert ca["target_modules"] != cb["target_modules"]
    assert sorted(ca["target_modules"]) == sorted(cb["target_modules"])
    assert ca["base_model_name_or_path"] != cb["base_model_name_or_path"]  # each process's own folder
    assert (a / "raw" / "README.md").exists()
    assert (a / "raw" / "adapter_model.safetensors").read_bytes() == (b / "raw" / "adapter_model.safetensors").read_bytes()
    assert weights_sha256(a / "raw") != weights_sha256(b / "raw")


def test_saved_adapter_is_byte_identical_across_hash_seeds(two_saves):
    a, b = two_saves
    fa, fb = _files(a / "adapter"), _files(b / "adapter")
    assert sorted(fa) == ["adapter_config.json", "adapter_model.safetensors"]
    assert sorted(fa) == sorted(fb)
    for name in fa:
        assert fa[name] == fb[name], f"{name} differs between PYTHONHASHSEED=1 and 2"
    assert weights_sha256(a / "adapter") == weights_sha256(b / "adapter")
    cfg = json.loads(fa["adapter_config.json"])
    assert cfg["target_modules"] == sorted(cfg["target_modules"])
    assert cfg["base_model_name_or_path"] is None
    # the weights are peft's own, untouched
    assert fa["adapter_model.safetensors"] == (a / "raw" / "adapter_model.safetensors").read_bytes()


def test_normalised_adapter_loads_back_the_same_weights(two_saves, tmp_path):
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    a, _ = two_saves
    base = AutoModelForCausalLM.from_pretrained(a / "base", dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(a / "adapter"))
    assert sorted(model.peft_config["default"].target_modules) == sorted(
        json.loads((a / "adapter" / "adapter_config.json").read_text())["target_modules"])
    saved = load_file(a / "adapter" / "adapter_model.safetensors")
    from peft import get_peft_model_state_dict

    live = get_peft_model_state_dict(model)
    assert sorted(saved) == sorted(live)
    assert all(torch.equal(saved[k], live[k]) for k in saved)


def test_canonicalising_is_idempotent(two_saves, tmp_path):
    import shutil

    a, _ = two_saves
    d = tmp_path / "again"
    shutil.copytree(a / "adapter", d)
    before = _files(d)
    canonicalise_adapter_dir(d)
    assert _files(d) == before


def test_raw_save_canonicalises_to_the_normalised_one(two_saves, tmp_path):
    """An adapter saved before the fix (peft's raw folder) is repaired in place by canonicalise_adapter_dir."""
    import shutil

    a, b = two_saves
    for src, name in ((a, "a"), (b, "b")):
        shutil.copytree(src / "raw", tmp_path / name)
        canonicalise_adapter_dir(tmp_path / name)
    assert _files(tmp_path / "a") == _files(tmp_path / "b") == _files(a / "adapter")


def test_safetensors_metadata_order_is_canonical(tmp_path):
    """safetensors keeps ``__metadata__`` in a Rust HashMap: several keys come out in a random order."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    tensors = {"b": torch.arange(4, dtype=torch.float32), "a": torch.ones(3, dtype=torch.float16),
               "c": torch.zeros(2, 2, dtype=torch.float64)}
    meta = {f"key{i}": str(i) for i in range(16)}
    raws = []
    for i in range(4):
        p = tmp_path / f"m{i}.safetensors"
        save_file(tensors, p, metadata=meta)
        raws.append(p.read_bytes())
    canon = [_canonical_safetensors(r, tmp_path / "x") for r in raws]
    assert len(set(canon)) == 1
    assert _canonical_safetensors(canon[0], tmp_path / "x") == canon[0]
    p = tmp_path / "canon.safetensors"
    p.write_bytes(canon[0])
    with safe_open(str(p), framework="pt") as f:
        assert f.metadata() == meta
        assert sorted(f.keys()) == sorted(tensors)
        for k, t in tensors.items():
            assert torch.equal(f.get_tensor(k), t)


def test_equal_trainer_states_save_to_equal_bytes(tmp_path, monkeypatch):
    """The checkpoint's trainer.pt: torch.save would name its archive after the temporary file."""
    from presdep.training import checkpoints

    param = torch.nn.Parameter(torch.arange(4, dtype=torch.float32))
    opt = torch.optim.AdamW([param], lr=0.1)
    param.grad = torch.ones(4)
    opt.step()
    monkeypatch.setattr(checkpoints, "save_adapter", lambda m, d: Path(d).mkdir(parents=True))
    monkeypatch.setattr(checkpoints, "adapter_state", lambda m: {"w": param.detach().clone()})
    saved = []
    for run in ("a", "b"):
        torch.manual_seed(0)
        final = checkpoints.write_checkpoint(tmp_path / run, 2, object(), opt, [{"step": 2}], [])
        saved.append((final / "trainer.pt").read_bytes())
    assert saved[0] == saved[1]
