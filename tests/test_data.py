"""Data: prompt template, loaders (files, names, Hub fallback), bad rows, procedural tasks."""

from __future__ import annotations

import json
import re
import sys

import pytest

from pacs_rl.data import (
    INSTRUCTION,
    DataError,
    arithmetic_pool_size,
    arithmetic_problems,
    arithmetic_splits,
    build_messages,
    format_prompt,
    is_held_out,
    load_problems,
    split_disjoint,
)

# --------------------------------------------------------------------------------------------------
# Prompt (Appendix B.1)


def test_build_messages_appends_instruction():
    msgs = build_messages("What is 2 + 2?")
    assert msgs == [
        {
            "role": "user",
            "content": "What is 2 + 2? Please reason step by step, and put your final answer within \\boxed{}.",
        }
    ]
    assert build_messages("x", system_prompt="You are a helpful assistant.")[0]["role"] == "system"


def test_format_prompt_uses_chat_template(tiny_tokenizer):
    text = format_prompt(tiny_tokenizer, "What is 2 + 2?")
    # The tiny tokenizer's template is ChatML (pacs_rl.models.CHAT_TEMPLATE), written out by hand here.
    assert text == ("<|im_start|>user\nWhat is 2 + 2? " + INSTRUCTION + "<|im_end|>\n<|im_start|>assistant\n")


def test_format_prompt_without_template(tiny_tokenizer):
    import copy

    bare = copy.deepcopy(tiny_tokenizer)  # the fixture is shared: do not mutate it
    bare.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        format_prompt(bare, "What is 1 + 1?")
    assert format_prompt(bare, "What is 1 + 1?", plain_fallback=True) == (
        "Question: What is 1 + 1? " + INSTRUCTION + "\nAnswer:"
    )


# --------------------------------------------------------------------------------------------------
# Loaders on the shared data


def test_load_local_jsonl(shared_data):
    probs = load_problems(shared_data / "math500.jsonl", limit=5)
    rows = [json.loads(line) for line in (shared_data / "math500.jsonl").read_text().splitlines()[:5]]
    assert [p.id for p in probs] == [r["id"] for r in rows]
    assert [p.answer for p in probs] == [r["answer"].strip() for r in rows]
    assert probs[0].extras["subject"] == rows[0]["subject"]
    assert probs.skipped == 0


def test_benchmark_name_via_data_dir(shared_data, monkeypatch):
    monkeypatch.setenv("PACS_RL_DATA_DIR", str(shared_data))
    n_lines = sum(1 for line in (shared_data / "minerva_math.jsonl").read_text().splitlines() if line.strip())
    assert len(load_problems("minerva")) == n_lines  # minerva -> minerva_math.jsonl
    aime = load_problems("AIME24")
    assert len(aime) == 30 and aime[0].id == "aime2024-I-1"


def test_benchmark_offline_error_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("PACS_RL_DATA_DIR", str(tmp_path))  # exists but holds no aime25.jsonl
    with pytest.raises(DataError) as e:
        load_problems("aime25")
    msg = str(e.value)
    assert "local file instead (path/to/aime25.jsonl" in msg and "PACS_RL_DATA_DIR" in msg


def test_unknown_source_and_missing_file(tmp_path):
    with pytest.raises(DataError, match="unknown benchmark"):
        load_problems("not-a-benchmark")
    with pytest.raises(DataError, match="file not found"):
        load_problems(tmp_path / "nope.jsonl")


# --------------------------------------------------------------------------------------------------
# Bad rows


def _write_bad_file(path):
    lines = [
        json.dumps({"id": "a", "problem": "1+1?", "answer": "2"}),
        '{"id": "b", "problem": "broken',  # line 2: bad JSON
        json.dumps({"id": "c", "problem": "no answer"}),  # line 3: missing field
        json.dumps({"id": "d", "problem": "empty", "answer": "  "}),  # line 4: empty
        json.dumps({"id": "e", "problem": "list", "answer": ["1", "2"]}),  # line 5: not a string
        json.dumps({"id": "a", "problem": "dup", "answer": "3"}),  # line 6: duplicate id
        json.dumps({"id": "g", "problem": "float answer", "answer": 27.0}),  # ok: whole number
        "",
        json.dumps({"id": 8, "problem": "int id", "answer": 5}),  # ok
    ]
    path.write_text("\n".join(lines) + "\n")


def test_bad_rows_raise_with_file_line_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    _write_bad_file(path)
    with pytest.raises(DataError) as e:
        load_problems(path)
    assert str(path) in str(e.value) and "line 2" in str(e.value) and "bad JSON" in str(e.value)

    # the first error of each kind names the line and the field
    path.write_text(json.dumps({"id": "x", "problem": "p"}) + "\n")
    with pytest.raises(DataError, match=r"line 1: missing field 'answer'"):
        load_problems(path)
    path.write_text(json.dumps({"id": "x", "problem": "p", "answer": None}) + "\n")
    with pytest.raises(DataError, match=r"line 1: field 'answer' is null"):
        load_problems(path)


def test_bad_rows_skipped_and_counted(tmp_path):
    path = tmp_path / "bad.jsonl"
    _write_bad_file(path)
    probs = load_problems(path, on_error="skip")
    assert [p.id for p in probs] == ["a", "g", "8"]
    assert [p.answer for p in probs] == ["2", "27", "5"]
    assert probs.skipped == 5
    assert [re.search(r"line (\d+)", m).group(1) for m in probs.skip_messages] == ["2", "3", "4", "5", "6"]


def test_json_and_parquet_and_custom_fields(tmp_path):
    rows = [{"q": f"What is {i} + 1?", "sol": str(i + 1)} for i in range(4)]
    (tmp_path / "d.json").write_text(json.dumps(rows))
    probs = load_problems(tmp_path / "d.json", problem_field="q", answer_field="sol")
    assert [p.answer for p in probs] == ["1", "2", "3", "4"] and probs[0].id == "d-0"

    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    probs = load_problems(tmp_path / "d.parquet", problem_field="q", answer_field="sol", limit=2)
    assert [p.problem for p in probs] == ["What is 0 + 1?", "What is 1 + 1?"]


# --------------------------------------------------------------------------------------------------
# Procedural arithmetic


def _solve(text: str) -> int:
    a, op, b = re.fullmatch(r"What is (\d+) ([+\-*]) (\d+)\?", text).groups()
    a, b = int(a), int(b)
    return a + b if op == "+" else a - b if op == "-" else a * b


def test_arithmetic_deterministic_correct_distinct():
    a = arithmetic_problems(200, seed=7)
    assert a == arithmetic_problems(200, seed=7)
    assert [p.problem for p in a] != [p.problem for p in arithmetic_problems(200, seed=8)]
    assert all(str(_solve(p.problem)) == p.answer for p in a)
    assert len({p.problem for p in a}) == 200 and len({p.id for p in a}) == 200
    assert all(10 <= p.extras["a"] <= 99 and 10 <= p.extras["b"] <= 99 for p in a)
    assert {p.extras["op"] for p in arithmetic_problems(50, seed=1, ops="+")} == {"+"}


def test_arithmetic_train_test_disjoint():
    train, test = arithmetic_splits(3000, 1000, seed=0)
    assert not {p.problem for p in train} & {p.problem for p in test}
    # disjoint by construction, whatever the seeds
    other = arithmetic_problems(1000, seed=123, split="test")
    assert not {p.problem for p in train} & {p.problem for p in other}
    assert all(is_held_out(p.extras["a"], p.extras["op"], p.extras["b"]) for p in test)
    # the held-out part is about HELD_OUT_FRACTION of the space
    space = [(a, op, b) for op in "+-*" for a in range(10, 100) for b in range(10, 100)]
    frac = sum(is_held_out(*t) for t in space) / len(space)
    assert 0.18 < frac < 0.22


def test_arithmetic_capacity_and_source_string():
    with pytest.raises(ValueError, match="only"):
        arithmetic_problems(100, seed=0, ops="+", digits=1, split="test")  # 100 one-digit sums in all
    assert load_problems("arithmetic?n=5&seed=2&ops=+") == arithmetic_problems(
        5, seed=2, ops="+", split="test"
    )
    assert len(load_problems("arithmetic")) == 100
    with pytest.raises(DataError, match="unknown option"):
        load_problems("arithmetic?n=5&size=3")


def test_arithmetic_operands_of_different_lengths():
    probs = arithmetic_problems(300, seed=0, ops="+-", digits="2,1", split="train")
    assert all(10 <= p.extras["a"] <= 99 and 0 <= p.extras["b"] <= 9 for p in probs)
    assert {p.extras["op"] for p in probs} == {"+", "-"}
    assert all(int(p.answer) == eval(p.problem[8:-1]) for p in probs)  # "What is 47 - 8?"
    assert probs == arithmetic_problems(300, seed=0, ops="+-", digits=(2, 1), split="train")
    # equal lengths written as a pair are the same task, with the same draws, as the single length
    assert arithmetic_problems(20, digits=(2, 2)) == arithmetic_problems(20, digits=2)
    # the pool sizes are exact and the two splits partition the space
    train_n = arithmetic_pool_size(ops="+-", digits="2,1", split="train")
    test_n = arithmetic_pool_size(ops="+-", digits="2,1", split="test")
    assert train_n + test_n == 90 * 10 * 2 == arithmetic_pool_size(ops="+-", digits="2,1", split=None)
    held = arithmetic_problems(test_n, seed=1, ops="+-", digits="2,1", split="test")
    assert len({p.problem for p in held}) == test_n
    assert not {p.problem for p in held} & {p.problem for p in probs}
    with pytest.raises(ValueError, match="only"):
        arithmetic_problems(test_n + 1, ops="+-", digits="2,1", split="test")
    assert load_problems("arithmetic?n=4&ops=-&digits=2,1") == arithmetic_problems(
        4, ops="-", digits=(2, 1), split="test"
    )
    for bad in ("2,1,1", "0", "x", 7):
        with pytest.raises(ValueError, match="digits must be"):
            arithmetic_problems(1, digits=bad)


def test_reasoning_gym_source_and_disjoint_split():
    reasoning_gym = pytest.importorskip("reasoning_gym")  # an optional extra: pacs-rl[gym]

    probs = load_problems("reasoning_gym:basic_arithmetic?size=20&seed=1")
    ref = list(reasoning_gym.create_dataset("basic_arithmetic", size=20, seed=1))
    assert [p.problem for p in probs] == [r["question"] for r in ref]
    assert [p.answer for p in probs] == [r["answer"] for r in ref]
    held = load_problems("reasoning_gym:basic_arithmetic?size=10&seed=2")
    train = list(probs) + held[:3] + probs[:2]  # 3 leaks + 2 duplicates
    kept, dropped = split_disjoint(train, held)
    assert dropped >= 5 and not {p.problem for p in kept} & {p.problem for p in held}
    assert len({p.problem for p in kept}) == len(kept)
    with pytest.raises(DataError, match="reasoning_gym task"):
        load_problems("reasoning_gym:no_such_task?size=2")


def test_reasoning_gym_missing_names_source_and_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # makes `import reasoning_gym` raise ImportError
    with pytest.raises(DataError) as info:
        load_problems("reasoning_gym:basic_arithmetic?size=5&seed=1")
    message = str(info.value)
    assert "'reasoning_gym:basic_arithmetic?size=5&seed=1'" in message
    assert 'pip install "pacs-rl[gym]"' in message
