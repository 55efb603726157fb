"""A key pasted into the config never reaches a config error message or a log."""

import copy
import logging

import pytest
from config_errors import config_error, load_error

from presdep.config.secret_masking import config_secrets, is_secret_name, looks_like_secret, mask, masked_text

KEY = "sk-proj-AbC1dEf2GhI3jKl4MnO5pQr6StU7vWx8Yz9AbC0dEf1GhI2"


@pytest.fixture
def config(default_config):
    return copy.deepcopy(default_config)


@pytest.mark.parametrize("where", [("teachers", "self"), ("variants", "hosted_grader", "hosted")])
def test_a_key_in_api_key_env_is_refused_without_printing_it(config, caplog, where):
    caplog.set_level(logging.DEBUG)
    node = config
    for part in where:
        node = node.setdefault(part, {})
    node.update({"model": "gpt", "base_url": "http://127.0.0.1:1/v1"} if where[-1] == "hosted" else {})
    node["api_key_env"] = KEY
    message = load_error(config)
    assert f"{'.'.join(where)}.api_key_env: api_key_env names an environment variable, not the key itself" in message
    assert KEY not in message and KEY[8:] not in message
    assert KEY not in caplog.text and KEY[8:] not in caplog.text


def test_an_api_key_env_that_is_no_variable_name_is_refused_masked(config):
    config["teachers"]["self"]["api_key_env"] = "openai-key"
    message = config_error(config)
    assert "teachers.self.api_key_env: …(masked, 10 chars) is not the name of an environment variable" in message
    assert "openai-key" not in message


def test_a_key_pasted_into_any_value_is_masked_in_every_message(config):
    config["teachers"]["self"]["model"] = KEY  # a name check prints the value it cannot find
    config["variants"]["off_the_shelf"]["chunking"] = KEY  # a schema check prints it too
    message = config_error(config)
    assert f"variants.off_the_shelf.chunking: 'sk-p…(masked, {len(KEY)} chars)' is not one of" in message
    assert KEY not in message
    config["variants"]["off_the_shelf"]["chunking"] = "contiguous"
    message = config_error(config)
    assert f"teachers.self.model: 'sk-p…(masked, {len(KEY)} chars)' is not a key of models" in message
    assert KEY not in message


def test_a_secret_named_value_is_masked_where_a_schema_error_repeats_it(config):
    config["teachers"]["self"]["model"] = {"token": "plain-words-but-secret"}
    message = config_error(config)
    assert "teachers.self.model:" in message and "plain-words-but-secret" not in message


@pytest.mark.parametrize("value,secret", [
    (KEY, True), ("sk-ant-api03-" + "x" * 40, True), ("ghp_" + "a1B2" * 9, True), ("hf_" + "Ab3" * 12, True),
    ("Zq8kP2mX7vR4tL9wN3bH6yC1dF5gJ0sAe", True), ("Bearer abcdefghijklmnop1234", True),
    ("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", False),  # a sha256 digest
    ("sentence-transformers/msmarco-MiniLM-L6-cos-v5", False), ("Alibaba-NLP/gte-multilingual-reranker-base", False),
    ("OPENAI_API_KEY", False), ("resources/datasets/msmarco-train/train/candidates.json", False), (42, False),
    ("resources/datasets/synthetic-task-responses-of-the-long-name", False),  # "sk-" inside a word
])
def test_what_looks_like_a_key(value, secret):
    assert looks_like_secret(value) is secret


def test_names_that_hold_secrets_and_names_that_count_tokens():
    assert all(map(is_secret_name, ["api_key", "api_key_env", "hf_token", "apikey", "client_secret", "password"]))
    assert not any(map(is_secret_name, ["max_tokens", "micro_batch_tokens", "model", "sha256", "keys_of"]))


def test_masking_shows_a_few_characters_of_a_long_value_and_its_length():
    assert mask(KEY) == f"sk-p…(masked, {len(KEY)} chars)"
    assert mask("hunter2") == "…(masked, 7 chars)"
    assert masked_text(f"x: {KEY!r} and {KEY}", config_secrets({"a": KEY})) == \
        f"x: 'sk-p…(masked, {len(KEY)} chars)' and sk-p…(masked, {len(KEY)} chars)"
    assert config_secrets({"api_key_env": "OPENAI_API_KEY"}) == set()
    assert config_secrets({"api_key_env": "OPENAI_API_KEY"}, by_name=True) == {"OPENAI_API_KEY"}


def test_the_workflow_refuses_a_pasted_key_without_printing_or_logging_it(tmp_path):
    """The real workflow: neither the terminal nor Snakemake's own log under .snakemake/log/ holds the key."""
    import yaml
    from workflow_utils import REPO, scratch_workflow, snakemake

    from presdep.config import load_yaml

    work = scratch_workflow(tmp_path)
    config = load_yaml(REPO / "workflow_config.yaml")
    config["teachers"]["self"]["api_key_env"] = KEY
    (work / "pasted.yaml").write_text(yaml.safe_dump(config))
    # Not a dry run: Snakemake keeps its log of a real run (the config stops it before any job).
    res = snakemake(work, "results/table1.csv", "--cores", "1", "--configfile", "pasted.yaml", check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "api_key_env names an environment variable, not the key itself" in out
    logs = "".join(p.read_text(errors="replace") for p in (work / ".snakemake" / "log").glob("*"))
    assert "api_key_env names an environment variable" in logs
    assert KEY[8:] not in out and KEY[8:] not in logs
    assert not (work / "results").exists()
