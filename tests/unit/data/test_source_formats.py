"""Corpus and topics sources: the schema's format enums are the readers' dispatch tables, and
each admitted format (tsv, TREC SGML documents and topics, rank_llm JSON as a corpus) reads."""

from __future__ import annotations

import copy
import json

import pytest
from workflow_utils import REPO

from presdep.config import SCHEMA_PATH, ConfigError, load_yaml, validate_config
from presdep.config.schema_enums import defs_enum
from presdep.contracts.errors import InputFormatError
from presdep.data.corpus import (
    CORPUS_READERS,
    TOPICS_READERS,
    MissingDocumentsError,
    iter_corpus,
    lookup_docs,
    read_queries,
)


def test_schema_enums_are_the_readers_dispatch_tables():
    assert sorted(defs_enum("corpus_source")) == sorted(CORPUS_READERS)
    assert sorted(defs_enum("topics_source")) == sorted(TOPICS_READERS)
    assert "rank_llm_json" in CORPUS_READERS and "rank_llm_json" not in TOPICS_READERS


def _with_dataset(corpus: dict, topics: dict) -> dict:
    config = copy.deepcopy(load_yaml(REPO / "workflow_config.yaml"))
    config["datasets"]["mine"] = {
        "task": "rerank", "qrels": {"format": "trec", "path": "q.txt"},
        "candidates": {"format": "bm25", "corpus": corpus, "topics": topics}}
    return config


@pytest.mark.parametrize("fmt", sorted(CORPUS_READERS))
def test_config_admits_every_corpus_format(fmt):
    source = {"format": fmt, "id": "x"} if fmt == "irds" else {"format": fmt, "path": "not-there"}
    validated = validate_config(_with_dataset(source, {"format": "trec", "path": "t.txt"}), SCHEMA_PATH)
    assert validated["datasets"]["mine"]["candidates"]["corpus"]["format"] == fmt


def test_config_refuses_rank_llm_json_as_topics():
    with pytest.raises(ConfigError, match=r"datasets\.mine\.candidates\.topics\.format"):
        validate_config(_with_dataset({"format": "tsv", "path": "c.tsv"}, {"format": "rank_llm_json", "path": "x"}),
                        SCHEMA_PATH)


def test_tsv_corpus_is_msmarco_collection_tsv(tmp_path):
    path = tmp_path / "collection.tsv"
    path.write_text("0\tThe presence of communication\tamid scientific minds\n1\tThe Manhattan Project\n",
                    encoding="utf-8")
    docs = list(iter_corpus(path, "tsv"))
    assert [(d.doc_id, d.title, d.text) for d in docs] == [
        ("0", "", "The presence of communication\tamid scientific minds"),  # the text is all after the first tab
        ("1", "", "The Manhattan Project")]
    path.write_text("0\tone\n0\ttwo\n", encoding="utf-8")
    with pytest.raises(InputFormatError, match=r"collection.tsv, line 2: document id '0' appears twice"):
        list(iter_corpus(path, "tsv"))
    path.write_text("0\tone\n1\n", encoding="utf-8")
    with pytest.raises(InputFormatError, match=r"line 2: expected 'docid<TAB>text', got '1'"):
        list(iter_corpus(path, "tsv"))


def test_tsv_topics(tmp_path):
    path = tmp_path / "queries.tsv"
    path.write_text("1\tfirst query\n2\tsecond\n", encoding="utf-8")
    assert read_queries(path, "tsv") == {"1": "first query", "2": "second"}


SGML = """<DOC>
<DOCNO> FBIS3-1 </DOCNO>
<HT> "cr00000011094001" </HT>
<HEADLINE>
Mice &amp; Men
</HEADLINE>
<TEXT>
First line of the text.
Second line.
</TEXT>
</DOC>
<DOC><DOCNO>b</DOCNO><TEXT>one line</TEXT></DOC>

<DOC>
<DOCNO>c</DOCNO>
plain text without a TEXT tag
</DOC>
"""


def test_trec_sgml_documents(tmp_path):
    path = tmp_path / "docs.trec"
    path.write_text(SGML, encoding="utf-8")
    docs = list(iter_corpus(path, "trec"))
    assert [d.doc_id for d in docs] == ["FBIS3-1", "b", "c"]
    assert docs[0].text == '"cr00000011094001"\nMice & Men\nFirst line of the text.\nSecond line.'
    assert docs[0].title == "" and docs[1].text == "one line" and docs[2].text == "plain text without a TEXT tag"


@pytest.mark.parametrize("content, match", [
    ("<DOC>\n<TEXT>x</TEXT>\n</DOC>\n", r"line 1: the <DOC> starting here has 0 <DOCNO>"),
    ("<DOC>\n<DOCNO>a</DOCNO>\nx\n", r"line 1: this <DOC> has no </DOC>"),
    ("<DOC><DOCNO>a</DOCNO>x</DOC>\nstray words\n", r"line 2: text outside <DOC>...</DOC>: 'stray words'"),
    ("<DOC><DOCNO>a</DOCNO>x\n<DOC><DOCNO>b</DOCNO>y</DOC>\n",
     r"line 2: a new <DOC> before the </DOC> of the one at line 1"),
    ("<DOC><DOCNO>a</DOCNO>x</DOC>\n<DOC><DOCNO>a</DOCNO>y</DOC>\n",
     r"line 2: document id 'a' appears twice \(first at line 1\)"),
    ('{"id": "a", "contents": "x"}\n', r"line 1: text outside <DOC>.*this looks like JSON lines.*use format: jsonl"),
])
def test_trec_sgml_errors_name_the_line(tmp_path, content, match):
    path = tmp_path / "docs.trec"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputFormatError, match=match) as err:
        list(iter_corpus(path, "trec"))
    assert str(path) in str(err.value)


TOPICS = """<top>
<num> Number: 301
<title> International Organized Crime

<desc> Description:
Identify organizations that participate in
international criminal activity.

<narr> Narrative:
A relevant document must name the organization.
</top>

<top>
<num> Number: 302
<title> Poliomyelitis and Post-Polio
<desc> Description:
Is the disease under control?
</top>
"""


def test_trec_topics_are_tab_or_sgml_by_the_first_line(tmp_path):
    sgml = tmp_path / "topics.robust.txt"
    sgml.write_text(TOPICS, encoding="utf-8")
    assert read_queries(sgml, "trec") == {"301": "International Organized Crime", "302": "Poliomyelitis and Post-Polio"}
    assert read_queries(sgml, "trec", field="desc")["301"] == (
        "Identify organizations that participate in international criminal activity.")
    with pytest.raises(InputFormatError, match=r"line 13: topic '302' has no \(or an empty\) <narr>"):
        read_queries(sgml, "trec", field="narr")
    tab = tmp_path / "topics.dl19.txt"
    tab.write_text("264014\thow long is life cycle of flea\n", encoding="utf-8")
    assert read_queries(tab, "trec") == {"264014": "how long is life cycle of flea"}


def _rank_llm(tmp_path, entries) -> str:
    path = tmp_path / "retrieve_results.json"
    path.write_text(json.dumps(entries), encoding="utf-8")
    return str(path)


def _hit(qid, docid, content, rank):
    return {"qid": qid, "docid": docid, "content": content, "rank": rank, "score": 10.0 - rank}


def test_rank_llm_json_as_a_corpus(tmp_path):
    path = _rank_llm(tmp_path, [{"query": "q1", "hits": [_hit("1", "a", "alpha", 1), _hit("1", "b", "beta", 2)]},
                                {"query": "q2", "hits": [_hit("2", "b", "beta", 1), _hit("2", "c", "gamma", 2)]}])
    docs = list(iter_corpus(path, "rank_llm_json"))
    assert [(d.doc_id, d.text) for d in docs] == [("a", "alpha"), ("b", "beta"), ("c", "gamma")]


def test_rank_llm_json_corpus_refuses_one_docid_with_two_texts(tmp_path):
    path = _rank_llm(tmp_path, [{"query": "q1", "hits": [_hit("1", "a", "alpha", 1), _hit("1", "b", "beta", 2)]},
                                {"query": "q2", "hits": [_hit("2", "c", "gamma", 1), _hit("2", "b", "BETA", 2)]}])
    with pytest.raises(InputFormatError, match=r"entry 1 hit 1: document 'b' has a different content here than in "
                                               r"entry 0 hit 1"):
        # lookup_docs stops at the first match of every id: the check must not depend on that.
        lookup_docs(path, "rank_llm_json", ["a"])


def test_lookup_docs_names_the_corpus_and_the_run(tmp_path):
    corpus = tmp_path / "collection.tsv"
    corpus.write_text("a\talpha\n", encoding="utf-8")
    huge = "z" * 100_000
    with pytest.raises(MissingDocumentsError) as err:
        lookup_docs(corpus, "tsv", ["a", "zz", huge], ids_from="run.trec")
    message = str(err.value)
    assert message.startswith(f"{corpus}, whole file: 2 document id(s) of run.trec are not in this corpus")
    assert "'zz'" in message and "(100,000 characters)" in message and len(message) < 400
    assert err.value.path == str(corpus) and isinstance(err.value, KeyError)


def test_a_folder_given_as_a_rank_llm_json_corpus_is_refused_when_the_config_is_validated(tmp_path):
    from presdep.config import load_workflow_config

    folder = tmp_path / "retrieve_results"
    folder.mkdir()
    config = {"protocol": {}, "variants": {"bm25": {"scorer": "identity"}}, "datasets": {"y": {
        "task": "rerank", "qrels": {"format": "trec", "path": str(tmp_path / "not_yet.txt")},
        "candidates": {"format": "trec_run", "run": str(tmp_path / "run.trec"),
                       "corpus": {"format": "rank_llm_json", "path": str(folder)},
                       "topics": {"format": "tsv", "path": str(tmp_path / "topics.tsv")}}}}}
    with pytest.raises(ConfigError, match=r"datasets\.y\.candidates\.corpus\.path: .* is a directory; expected a "
                                          r"file \(format rank_llm_json\)"):
        load_workflow_config(config, SCHEMA_PATH)
