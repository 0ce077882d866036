"""Bad input: a DataError naming the file, the row and the key, and no prepared output left behind."""

from __future__ import annotations

import json
import re

import pytest

from components.config import parse_config
from components.data.prepare import run
from components.data.schema import DataError
from components.tracking.tracker import NullTracker


def jl(*rows) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in rows)


def fr(i, answers=("x",), **kw):
    return {"id": f"q{i}", "question": f"question {i}?", "golden_answers": list(answers), **kw}


def hp(i, **drop):
    row = {
        "question": f"question {i}?", "answer": "yes",
        "supporting_facts": {"title": ["T"], "sent_id": [0]},
        "context": {"title": ["T", "U"], "sentences": [["T is a thing."], ["U is too."]]},
    }  # fmt: skip
    return {k: v for k, v in row.items() if k not in drop}


def ircot(i, ctx=None):
    ctx = ctx or [{"id": "0", "title": "T", "paragraph_text": "T text.", "is_supporting": True}]
    return {"question_id": f"q{i}", "question_text": "q?", "answers_objects": [{"spans": ["a"]}], "contexts": ctx}


GOOD = jl(fr(1), fr(2), fr(3))
CASES = {
    # name: (format, file name, bytes, regex the message must match after the file path)
    "truncated_jsonl": ("flashrag", "qa.jsonl", GOOD + json.dumps(fr(4)).encode()[:25] + b"\n",
                        r"qa\.jsonl: line 4: invalid JSON \(truncated\?\)"),
    "truncated_json_list": ("hotpotqa_hf", "hp.json", json.dumps([hp(0), hp(1), hp(2)]).encode()[:-40],
                            r"hp\.json: row 2 \(line 1\): invalid JSON \(truncated\?\)"),
    "missing_field": ("flashrag", "qa.jsonl", jl(fr(1), {"id": "q2", "question": "q?"}),
                      r"qa\.jsonl: line 2: missing field 'golden_answers'"),
    "missing_nested_field": ("hotpotqa_ircot", "ir.jsonl", jl(ircot(1), ircot(2, [{"title": "T"}])),
                             r"ir\.jsonl: line 2: contexts\[0\]: missing field 'paragraph_text'"),
    "missing_field_json_list": ("hotpotqa_hf", "hp.json", json.dumps([hp(0), hp(1, context=1)]).encode(),
                                r"hp\.json: row 1: missing field 'context'"),
    "empty_jsonl": ("flashrag", "qa.jsonl", b"", r"qa\.jsonl: line 1: no records"),
    "blank_jsonl": ("kilt", "k.jsonl", b"\n  \n\n", r"k\.jsonl: line 1: no records"),
    "empty_json_list": ("hotpotqa_hf", "hp.json", b"[ ]", r"hp\.json: row 0: no records"),
    "nan_id": ("flashrag", "qa.jsonl", jl(fr(1), b'{"id": NaN, "question": "q?", "golden_answers": ["x"]}'),
               r"qa\.jsonl: line 2: field 'id' must be str or int, got float"),
    "duplicate_id": ("flashrag", "qa.jsonl", jl(fr(1), fr(2), fr(1)),
                     r"qa\.jsonl: line 3: duplicate id 'q1' \(first seen at .*qa\.jsonl: line 1\)"),
    "duplicate_id_2wiki": ("2wiki", "2w.jsonl", jl({"idx": 7, "question": "q?", "answer": "a"}) * 2,
                           r"2w\.jsonl: line 2: duplicate id '7'"),
    "empty_answers_list": ("flashrag", "qa.jsonl", jl(fr(1), fr(2, answers=[])),
                           r"qa\.jsonl: line 2: field 'golden_answers': empty answers"),
    "blank_answers": ("flashrag", "qa.jsonl", jl(fr(1), fr(2, answers=["", "  "])),
                      r"qa\.jsonl: line 2: field 'golden_answers': empty answers"),
    "empty_answer_string": ("2wiki", "2w.jsonl", jl({"idx": 1, "question": "q?", "answer": ""}),
                            r"2w\.jsonl: line 1: field 'answer' is empty"),
    "non_utf8_jsonl": ("flashrag", "qa.jsonl", jl(fr(1), b'{"id": "q2", "question": "caf\xe9?", "golden_answers": ["x"]}'),
                       r"qa\.jsonl: line 2: not valid UTF-8 \(byte 0xe9"),
    "non_utf8_json_list": ("musique", "mu.json", b'[\n{"id": "a"},\n{"id": "\xff"}\n]',
                           r"mu\.json: line 3: not valid UTF-8 \(byte 0xff"),
    "wrong_type": ("kilt", "kilt.jsonl", jl({"wikipedia_title": "T", "text": "not a list"}),
                   r"kilt\.jsonl: line 1: field 'text' must be list, got str"),
    "not_an_object": ("flashrag", "qa.jsonl", jl(fr(1), [1, 2]),
                      r"qa\.jsonl: line 2: expected a JSON object, got list"),
    "is_supporting_string": ("hotpotqa_ircot", "ir.jsonl",
                             jl(ircot(1), ircot(2, [{"title": "T", "paragraph_text": "T text.", "is_supporting": "no"}])),
                             r"ir\.jsonl: line 2: contexts\[0\]: field 'is_supporting' must be true or false, got str 'no'"),
    "is_supporting_number": ("musique", "mu.json", json.dumps([{"id": "m1", "question": "q?", "answer": "a", "paragraphs": [
                                 {"title": "T", "paragraph_text": "T text.", "is_supporting": 1}]}]).encode(),
                             r"mu\.json: row 0: paragraphs\[0\]: field 'is_supporting' must be true or false, got int 1"),
}  # fmt: skip


def wiki2(i, **kw):
    row = {"_id": f"w{i}", "question": "q?", "answer": "a",
           "context": [["T", ["T is a thing.", "More."]], ["U", ["U too."]]], "supporting_facts": [["T", 0]]}  # fmt: skip
    return {**row, **kw}


def orig(i, **kw):
    row = {"_id": f"h{i}", "question": "q?", "answer": "a",
           "context": [["T", ["T is a thing."]], ["U", [" U too."]]], "supporting_facts": [["T", 0]]}  # fmt: skip
    return {**row, **kw}


def mq(i, idx=1, second="Who founded #1 ?"):
    """A MuSiQue row whose decomposition's second step reads paragraph `idx` (1: the right one)."""
    pars = [{"title": t, "paragraph_text": f"{t} text.", "is_supporting": t != "C"} for t in ("A", "B", "C")]
    steps = [{"question": "What is A?", "answer": "B", "paragraph_support_idx": 0},
             {"question": second, "answer": "a", "paragraph_support_idx": idx}]  # fmt: skip
    return {"id": f"m{i}", "question": "q?", "answer": "a", "paragraphs": pars, "question_decomposition": steps}


def jlist(*rows) -> bytes:
    return json.dumps(list(rows)).encode()


LITERAL_CASES = {
    "literal_unclosed": ("2wiki_context", "2w.json", jlist(wiki2(0), wiki2(1, context="[['a', ['x']]")),
                         r"2w\.json: row 1: field 'context' is not a Python literal \(SyntaxError"),
    "literal_code_refused": ("2wiki_context", "2w.json", jlist(wiki2(0, supporting_facts="__import__('os')")),
                             r"2w\.json: row 0: field 'supporting_facts' is not a Python literal \(ValueError"),
    "literal_call_in_list": ("2wiki_context", "2w.json", jlist(wiki2(0, context="[['a', [open('x')]]]")),
                             r"2w\.json: row 0: field 'context' is not a Python literal \(ValueError"),
    "literal_not_a_list": ("2wiki_context", "2w.json", jlist(wiki2(0, context="{'T': 1}")),
                           r"2w\.json: row 0: field 'context' must hold a list, got dict"),
    "literal_bad_shape": ("2wiki_context", "2w.json", jlist(wiki2(0, context="[['T', 'not sentences']]")),
                          r"2w\.json: row 0: context\[0\] must be \[title, \[sentences\]\], got \['T', 'not sentences'\]"),
    "2wiki_context_wrong_type": ("2wiki_context", "2w.jsonl", jl(wiki2(0), wiki2(1, context=5)),
                                 r"2w\.jsonl: line 2: field 'context' must be list or str, got int"),
    "2wiki_context_missing_field": ("2wiki_context", "2w.json", jlist({k: v for k, v in wiki2(0).items() if k != "supporting_facts"}),
                                    r"2w\.json: row 0: missing field 'supporting_facts'"),
    "2wiki_context_missing_id": ("2wiki_context", "2w.json", jlist({k: v for k, v in wiki2(0).items() if k != "_id"}),
                                 r"2w\.json: row 0: missing field '_id'"),
    "original_bad_fact": ("hotpotqa_original", "ho.json", jlist(orig(0), orig(1, supporting_facts=[["T", "0"]])),
                          r"ho\.json: row 1: supporting_facts\[0\] must be \[title, sentence id\], got \['T', '0'\]"),
    "original_bad_context": ("hotpotqa_original", "ho.json", jlist(orig(0, context=[["T", ["x"]], {"title": "U"}])),
                             r"ho\.json: row 0: context\[1\] must be \[title, \[sentences\]\]"),
    "original_fact_title_absent": ("hotpotqa_original", "ho.json", jlist(orig(0, supporting_facts=[["Z", 0]])),
                                   r"ho\.json: row 0: field 'supporting_facts': titles \['Z'\] not in the context"),
    "original_literal_string_refused": ("hotpotqa_original", "ho.json", jlist(orig(0, context="[['T', ['x']]]")),
                                        r"ho\.json: row 0: field 'context' must be list, got str"),
    "hf_jsonl_missing_field": ("hotpotqa_hf", "hp.jsonl", jl(hp(0), hp(1, question=1)),
                               r"hp\.jsonl: line 2: missing field 'question'"),
    "musique_jsonl_truncated": ("musique", "mu.jsonl", b'{"id": "b", "para\n',
                                r"mu\.jsonl: line 1: invalid JSON \(truncated\?\)"),
    "musique_step_not_a_paragraph": ("musique", "mu.json", jlist(mq(0), mq(1, idx=5)),
                                     r"mu\.json: row 1: question_decomposition\[1\]: paragraph_support_idx 5 is not a paragraph"),
    "musique_step_not_supporting": ("musique", "mu.json", jlist(mq(0, idx=2)),
                                    r"mu\.json: row 0: question_decomposition\[1\]: paragraph_support_idx 2 is not a supporting paragraph"),
    "musique_step_bad_reference": ("musique", "mu.json", jlist(mq(0, second="Where is #2 ?")),
                                   r"mu\.json: row 0: question_decomposition\[1\]: field 'question': #2 names no earlier step"),
    "2wiki_bad_evidence": ("2wiki_context", "2w.json", jlist(wiki2(0, evidences="[['T', 'father']]")),
                           r"2w\.json: row 0: evidences\[0\] must be \[subject, relation, object\]"),
}  # fmt: skip
CASES.update(LITERAL_CASES)


def config(tmp_path, fmt, name):
    return parse_config({
        "project": {"data_dir": str(tmp_path / "data"), "artifacts_dir": str(tmp_path / "artifacts")},
        "data": {"synthetic": {"enabled": False}, "datasets": [
            {"name": "good", "format": "flashrag", "path": "good.jsonl"},
            {"name": "bad", "format": fmt, "path": name},
        ]},
    })  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_names_file_row_key_and_writes_nothing(tmp_path, case):
    fmt, name, content, pattern = CASES[case]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "good.jsonl").write_bytes(GOOD)
    (tmp_path / "data" / name).write_bytes(content)
    cfg = config(tmp_path, fmt, name)
    with pytest.raises(DataError) as err:
        run(cfg, NullTracker())
    message = str(err.value)
    assert message.startswith(str(tmp_path / "data" / name)), message
    assert re.search(pattern, message), message
    assert not (tmp_path / "artifacts" / "prepared").exists()


def test_bad_input_removes_stale_outputs(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "good.jsonl").write_bytes(GOOD)
    (tmp_path / "data" / "qa.jsonl").write_bytes(GOOD)
    cfg = config(tmp_path, "flashrag", "qa.jsonl")
    assert run(cfg, NullTracker())["questions/bad/dev"] == 3
    assert (tmp_path / "artifacts/prepared/questions.parquet").exists()
    (tmp_path / "data" / "qa.jsonl").write_bytes(GOOD[:-10])
    with pytest.raises(DataError, match="line 3: invalid JSON"):
        run(cfg, NullTracker())
    assert not (tmp_path / "artifacts" / "prepared").exists()
    assert sorted(p.name for p in (tmp_path / "artifacts").iterdir()) == []  # no temp leftovers either


def test_missing_file_names_the_param(tmp_path):
    cfg = config(tmp_path, "flashrag", "nope.jsonl")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "good.jsonl").write_bytes(GOOD)
    with pytest.raises(DataError, match=r"nope\.jsonl: file not found \(data.datasets\[1\].path\)"):
        run(cfg, NullTracker())



# Hostile input: each used to end `prepare` with a traceback and leave the old output in place.
HOSTILE = {
    "deep_nesting_jsonl": ("flashrag", "qa.jsonl", GOOD + b"[" * 100_000 + b"\n",
                           r"qa\.jsonl: line 4: invalid JSON: nested too deeply"),
    "deep_nesting_json_list": ("hotpotqa_original", "ho.json", b"[" + jlist(orig(0))[1:-1] + b",\n" + b"[" * 100_000,
                               r"ho\.json: row 1 \(line 2\): invalid JSON: nested too deeply"),
    "huge_int_id_jsonl": ("flashrag", "qa.jsonl", GOOD + b'{"id": ' + b"7" * 5000 + b', "question": "q?", "golden_answers": ["x"]}\n',
                          r"qa\.jsonl: line 4: invalid JSON: number too long .*5000 digits"),
    "huge_int_id_json_list": ("hotpotqa_original", "ho.json", b'[{"_id": ' + b"7" * 5000 + b"}]",
                              r"ho\.json: row 0 \(line 1\): invalid JSON: number too long"),
    "lone_surrogate_question": ("flashrag", "qa.jsonl", GOOD + jl(fr(4, question="caf\ud800?")),
                                r"qa\.jsonl: line 4: field 'question': not encodable as UTF-8 \(lone surrogate '\\ud800' at char 3\)"),
    "lone_surrogate_answer": ("flashrag", "qa.jsonl", jl(fr(1, answers=["ok", "x\udfff"])),
                              r"qa\.jsonl: line 1: field 'golden_answers\[1\]': not encodable as UTF-8"),
    "lone_surrogate_passage": ("hotpotqa_original", "ho.json", jlist(orig(0), orig(1, context=[["T", ["a", "b\udc00"]]])),
                               r"ho\.json: row 1: field 'context\[0\]\[1\]\[1\]': not encodable as UTF-8"),
    "lone_surrogate_in_literal": ("2wiki_context", "2w.json", jlist(wiki2(0, context="[['T', ['x\\ud800']]]")),
                                  r"2w\.json: row 0: field 'context\[0\]\[1\]\[0\]': not encodable as UTF-8"),
    # an escaped NUL (JSON's \u0000) is no text: refused, naming the field and where it is
    "nul_question": ("flashrag", "qa.jsonl", GOOD + jl(fr(4, question="caf\x00e?")),
                     r"qa\.jsonl: line 4: field 'question': contains a NUL character \(\\u0000\) at char 3"),
    "nul_passage": ("hotpotqa_original", "ho.json", jlist(orig(0), orig(1, context=[["T", ["a", "b\x00"]]])),
                    r"ho\.json: row 1: field 'context\[0\]\[1\]\[1\]': contains a NUL character"),
    "nul_in_literal": ("2wiki_context", "2w.json", jlist(wiki2(0, context="[['T', ['x\\x00']]]")),
                       r"2w\.json: row 0: field 'context\[0\]\[1\]\[0\]': contains a NUL character"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_input_is_a_data_error_and_removes_old_output(tmp_path, case):
    fmt, name, content, pattern = HOSTILE[case]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "good.jsonl").write_bytes(GOOD)
    (tmp_path / "data" / name).write_bytes(GOOD if fmt == "flashrag" else jlist(orig(0), wiki2(0) | {"_id": "h1"}))
    cfg = config(tmp_path, fmt, name)
    run(cfg, NullTracker())
    assert (tmp_path / "artifacts/prepared/questions.parquet").exists()  # the old output
    (tmp_path / "data" / name).write_bytes(content)
    with pytest.raises(DataError) as err:
        run(cfg, NullTracker())
    message = str(err.value)
    assert message.startswith(str(tmp_path / "data" / name)) and re.search(pattern, message), message
    assert len(message) < 500
    assert sorted(p.name for p in (tmp_path / "artifacts").iterdir()) == []


@pytest.mark.parametrize("name", ["ho.json", "ho.jsonl"])
def test_utf8_bom_is_accepted(tmp_path, name):
    body = jlist(orig(0), orig(1)) if name.endswith(".json") else jl(orig(0), orig(1))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "good.jsonl").write_bytes(GOOD)
    (tmp_path / "data" / name).write_bytes(b"\xef\xbb\xbf" + body)
    assert run(config(tmp_path, "hotpotqa_original", name), NullTracker())["questions/bad/dev"] == 2


def test_text_no_reader_checked_fails_at_write_without_output(tmp_path, monkeypatch):
    """A loader (e.g. through `datasets`) that lets a lone surrogate through: a DataError, the old output removed."""
    from components.data import prepare
    from components.data.schema import Question

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "good.jsonl").write_bytes(GOOD)
    (tmp_path / "data" / "qa.jsonl").write_bytes(GOOD)
    cfg = config(tmp_path, "flashrag", "qa.jsonl")
    run(cfg, NullTracker())
    fake = {**prepare.LOADERS, "flashrag": lambda spec, path, table: [Question(f"{spec.name}:1", "x\ud800", ["a"], spec.name, "dev")]}
    monkeypatch.setattr(prepare, "LOADERS", fake)  # a fault the shipped readers no longer produce
    with pytest.raises(DataError, match=r"prepared: a loaded text is not encodable as UTF-8 \(surrogates not allowed: '\\ud800'\)"):
        run(cfg, NullTracker())
    assert sorted(p.name for p in (tmp_path / "artifacts").iterdir()) == []


def test_huge_values_in_prepare_messages_are_cut(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "good.jsonl").write_bytes(GOOD)
    big = "i" * 1_000_000
    (tmp_path / "data" / "qa.jsonl").write_bytes(jl(fr(1) | {"id": big}, fr(2) | {"id": big}))
    with pytest.raises(DataError) as err:
        run(config(tmp_path, "flashrag", "qa.jsonl"), NullTracker())
    assert "line 2: duplicate id 'iii" in str(err.value) and "... [1,000,000 chars]'" in str(err.value)
    assert len(str(err.value)) < 600
