"""A tokenizer read from its files gives transformers' ids, and is used only where that is recorded.

Every shipped template and every render surface builds the same prompt ids through
:class:`FileTokenizer` as through ``AutoTokenizer`` (what jobs loaded before), on SmolLM2's real
tokenizer and on the rehearsal's stand-ins of each model-specific class. Where transformers
builds another backend than the file (the tests' character tokenizer under a Qwen2 config),
the check says so and jobs keep transformers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from scorers_tiny import tiny_causal_lm
from transformers import AutoTokenizer

from presdep.contracts.readouts import SlotRequest
from presdep.contracts.render_variants import KINDS, VARIANTS, render_of
from presdep.rehearsal.tiny_models import build_repo
from presdep.runtime.models import check_tokenizer, load_prompt_tokenizer
from presdep.runtime.tokenizer_files import CHECK_FILE, FileTokenizer, file_tokenizer
from presdep.scoring.template import GradeTokenError, SkeletonBuilder, grade_token_ids, load_template

TEMPLATES = Path(__file__).resolve().parents[3] / "presdep" / "scoring" / "templates"
# The rubrics a scorer reads as its own (0-3 grades); the other shipped ones are render surfaces.
OWN_RUBRICS = ("relevance_v2", "answer_support_v2", "response_quality_v2", "grade_prompt_v1")
QUERY = "why does water boil at a lower temperature on a mountain? (über café, 日本語)"
DOCS = ("At altitude the air pressure is lower, so water boils below 100 °C.",
        "Kettles\n\nand  steam: a <b>cooking</b> guide",
        "",
        "Sea level: 1 atm; 8,849 m: about 0.33 atm {braces} [1] \\ tab\there")


@pytest.fixture(scope="module")
def tokenizer_dirs(smollm2_model_dir, tmp_path_factory) -> dict[str, Path]:
    """SmolLM2's fetched folder (copied: the check is written beside it) and the rehearsal's stand-ins."""
    root = tmp_path_factory.mktemp("tokenizers")
    dirs = {"smollm2": root / "smollm2"}
    shutil.copytree(smollm2_model_dir, dirs["smollm2"])
    for model in ("qwen3_4b", "granite_4_1_8b", "rank_zephyr_7b", "mxbai_rerank_base_v2"):
        dirs[model] = build_repo(model, root / model)
    for d in dirs.values():
        check_tokenizer(d)
    return dirs


def requests() -> list[SlotRequest]:
    """An ordinary prompt, a slot read, and every render variant of every kind over four documents."""
    out = [SlotRequest(QUERY, DOCS, (1, 2, 3, 4), 4, (1, 2, 3, 4)), SlotRequest(QUERY, DOCS[:1], (3,), 5, (3,))]
    for kind in KINDS:
        for v in range(1, VARIANTS):
            render = render_of(kind, v, 4, seed=0, rubric="relevance_v2")
            out.append(SlotRequest(QUERY, DOCS, (1, 2, 3, 4), 4, (1, 2, 3, 4), render))
    return out


def test_every_shipped_rubric_is_covered():
    shipped = {p.stem for p in TEMPLATES.iterdir() if p.suffix in (".yaml", ".txt")}
    surfaces = {f"relevance_para{i}_v2" for i in range(1, 5)} | {
        "relevance_scale09_v2", "relevance_scale15_v2", "relevance_anchored_v2", "relevance_words_v2"}
    assert shipped == set(OWN_RUBRICS) | surfaces  # a new template joins one of the lists above


@pytest.mark.parametrize("model", ["smollm2", "qwen3_4b", "granite_4_1_8b", "rank_zephyr_7b", "mxbai_rerank_base_v2"])
def test_every_template_and_surface_builds_transformers_ids(tokenizer_dirs, model):
    d = tokenizer_dirs[model]
    record = json.loads((d / CHECK_FILE).read_text())
    assert record["same_ids"] is True
    mine, theirs = file_tokenizer(d), AutoTokenizer.from_pretrained(d)
    assert isinstance(mine, FileTokenizer)
    assert (mine.pad_token_id, mine.eos_token_id) == (theirs.pad_token_id, theirs.eos_token_id)
    for rubric in OWN_RUBRICS:
        try:
            b = SkeletonBuilder(theirs, load_template(rubric), max_doc_chars=40)
        except GradeTokenError as theirs_refusal:  # RankZephyr's metaspace tokenizer: "0" is two tokens
            with pytest.raises(GradeTokenError) as mine_refusal:
                SkeletonBuilder(mine, load_template(rubric), max_doc_chars=40)
            assert str(mine_refusal.value).split(" in tokenizer")[0] == str(theirs_refusal).split(" in tokenizer")[0]
            for request in requests():  # the chat prompt itself, as the generative scorers build it
                messages = load_template(rubric).messages(request.query, request.docs, 40)
                texts = [t.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
                         for t in (mine, theirs)]
                assert texts[0] == texts[1]
                assert mine.encode(texts[0], add_special_tokens=False) == theirs.encode(texts[1],
                                                                                        add_special_tokens=False)
            continue
        a = SkeletonBuilder(mine, load_template(rubric), max_doc_chars=40)
        assert a.grade_ids == b.grade_ids == grade_token_ids(theirs)
        for request in requests():
            x, y = a.build_request(request), b.build_request(request)
            assert (x.ids, x.read_positions, x.grade_ids) == (y.ids, y.read_positions, y.grade_ids), (rubric, request)
    # The chat template's own keywords reach it (Qwen3's enable_thinking writes an empty think block).
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": QUERY}]
    for flag in (True, False):
        assert (mine.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=flag)
                == theirs.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                              enable_thinking=flag))
    with pytest.raises(ValueError, match="add_special_tokens=False"):
        mine.encode("x")


def test_a_backend_transformers_rebuilds_differently_keeps_transformers(tmp_path):
    # The character tokenizer saved as the generic class, beside a Qwen2 config: AutoTokenizer
    # picks Qwen2Tokenizer by the model type and builds a byte-level BPE of the same vocabulary.
    d = tiny_causal_lm(tmp_path / "tiny")
    check_tokenizer(d)
    assert json.loads((d / CHECK_FILE).read_text())["same_ids"] is False
    assert file_tokenizer(d) is None
    tok = load_prompt_tokenizer({"source": "local", "path": str(d)})
    assert not isinstance(tok, FileTokenizer)
    text = "a\nb"
    assert tok.encode(text, add_special_tokens=False) == AutoTokenizer.from_pretrained(d).encode(
        text, add_special_tokens=False)


def test_a_check_holds_only_for_its_files_and_transformers(tokenizer_dirs, tmp_path):
    d = tmp_path / "smollm2"
    shutil.copytree(tokenizer_dirs["smollm2"], d)
    assert isinstance(load_prompt_tokenizer({"source": "local", "path": str(d)}), FileTokenizer)
    record = json.loads((d / CHECK_FILE).read_text())
    (d / CHECK_FILE).write_text(json.dumps({**record, "transformers": "0.0.1"}))
    assert file_tokenizer(d) is None  # another transformers may build another backend
    (d / CHECK_FILE).write_text(json.dumps(record))
    assert file_tokenizer(d) is not None
    config = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**config, "pad_token": "<|endoftext|>"}))
    assert file_tokenizer(d) is None  # an edited file is not the file that was checked
    (d / CHECK_FILE).unlink()
    assert file_tokenizer(d) is None
    tok = load_prompt_tokenizer({"source": "local", "path": str(d)})
    assert not isinstance(tok, FileTokenizer) and tok.pad_token == "<|endoftext|>"


def test_fetching_a_local_model_writes_the_check(tokenizer_dirs, tmp_path):
    from presdep.runtime.models import fetch_model

    src = tmp_path / "src"
    shutil.copytree(tokenizer_dirs["qwen3_4b"], src)
    (src / CHECK_FILE).unlink()
    out = fetch_model({"source": "local", "path": str(src)}, tmp_path / "fetched")
    assert json.loads((out / CHECK_FILE).read_text())["same_ids"] is True
    assert isinstance(load_prompt_tokenizer({"source": "local", "path": str(out)}), FileTokenizer)
