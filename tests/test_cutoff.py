"""Cut-off is a fact: a completion cut at the token limit is never paid by the training grader (``sound``), on
every path that samples (the fast sampler, TRL's generate, the held-out evaluation, verl's reward; vLLM in
tests/test_vllm_cpu.py), decided by one rule (``pacs_rl.rewards.cutoff.is_cut_off``); the paper's grader keeps
its verdicts and the runs count the cut-off answers it pays.

The adversary is a tiny random model made to loop its answer ("The final answer is 97.") by the position: every
cut of the loop is tried, on the grader directly and through the trainer."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from pacs_rl.integrations.verl.reward import compute_score, response_cut_off
from pacs_rl.rewards import RewardPool, make_math_reward_func, verify, verify_batch
from pacs_rl.rewards.cutoff import is_cut_off, refuses_cut_off
from train_helpers import tiny_run_kwargs

LOOP = "The final answer is 97. "


def looping(model, tokenizer, text: str, eos: bool = False):
    """``model`` made to write ``text`` over and over: at position p its next token is the loop's token p + 1
    (a +100 logit), so a completion starts where its prompt's length puts it in the loop and runs to the token
    limit (``eos``: each loop ends with the EOS token, so some completions finish within the limit)."""
    loop = tokenizer(text, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if eos else [])
    table = torch.tensor(loop)

    def hook(module, args, kwargs, output):
        positions = kwargs.get("position_ids")
        if positions is None:
            return output
        logits = output.logits
        upcoming = table[(positions[:, -logits.size(1) :].cpu() + 1) % len(loop)]
        upcoming = upcoming.expand(logits.shape[:2]).to(logits.device).unsqueeze(-1)
        output.logits = logits.scatter_add(-1, upcoming, torch.full_like(upcoming, 100.0, dtype=logits.dtype))
        return output

    model.register_forward_hook(hook, with_kwargs=True)
    return model, loop


def loop_ids(tokenizer, repeats: int = 6) -> list[int]:
    return tokenizer(LOOP * repeats, add_special_tokens=False)["input_ids"]


# ------------------------------------------------------------------------------------------------- the rule
def test_the_rule_prefers_the_finish_reason_else_counts_tokens_and_looks_for_eos():
    eos = {2}
    assert is_cut_off([5, 6, 7], 3, eos) and not is_cut_off([5, 6, 2], 3, eos)  # at the limit: EOS decides
    assert not is_cut_off([5, 6], 3, eos)  # below the limit: finished (a stop string, a tool call)
    assert is_cut_off([5, 6, 7, 8], 3, eos)  # past it (a tool's tokens counted in)
    assert is_cut_off([5], 3, eos, finish_reason="length") and not is_cut_off([5, 6, 7], 3, eos, "stop")
    assert not is_cut_off([5, 6, 7], None, eos)  # no limit known and no finish reason: not cut
    assert refuses_cut_off("sound") and refuses_cut_off("sound+echo")
    assert not refuses_cut_off("paper") and not refuses_cut_off("strict+multiple_boxed")


# ------------------------------------------------------------------------------------------- the adversary
def test_a_loop_cut_at_the_limit_is_never_paid_by_the_training_grader_whatever_the_cut(tiny_tokenizer):
    """Every cut of "The final answer is 97. " looped: the sound grader, told by TRL's completion ids and the
    limit, pays none; the paper's grader pays most (its verdicts stay the paper's), so the cuts do hold answers."""
    ids, eos = loop_ids(tiny_tokenizer), tiny_tokenizer.eos_token_id
    texts = [tiny_tokenizer.decode(ids[:cut]) for cut in range(1, len(ids) + 1)]
    paid = {}
    for grader in ("sound", "paper"):
        scores = []
        for cut, text in enumerate(texts, start=1):
            reward = make_math_reward_func(grader, max_completion_length=cut, stop_token_ids=[eos])
            scores += reward([text], answer=["97"], completion_ids=[ids[:cut]])
            assert reward.last_truncated == [True]
        paid[grader] = sum(scores)
    assert paid["sound"] == 0
    assert paid["paper"] > len(texts) / 2  # the exploit the paper's grader leaves open: counted, not closed
    # the same loop that stopped (EOS within the limit) is graded as any finished answer
    finished = [*ids[: len(tiny_tokenizer(LOOP.strip())["input_ids"])], eos]
    reward = make_math_reward_func("sound", max_completion_length=64, stop_token_ids=[eos])
    assert reward([LOOP.strip()], answer=["97"], completion_ids=[finished]) == [1.0]


def test_batches_in_process_and_in_a_pool_refuse_exactly_the_cut_off_ones():
    completions = [
        "The final answer is 97.",
        "The final answer is 96.",
        "The final answer is 97.",
        r"\boxed{97}",
    ]
    truncated = [True, False, False, True]
    expected = [(0.0, "truncated"), (0.0, "wrong"), (1.0, "correct"), (0.0, "truncated")]
    local = verify_batch(completions, ["97"] * 4, "sound", num_workers=0, truncated=truncated)
    with RewardPool(num_workers=1) as pool:
        pooled = pool.verify_batch(completions, ["97"] * 4, "sound", truncated=truncated)
    for result in (local, pooled):
        assert [(v.score, v.reason) for v in result.verdicts] == expected
        assert result.reasons["truncated"] == 2
    paper = verify_batch(completions, ["97"] * 4, "paper", num_workers=0, truncated=truncated)
    assert paper.scores == [1.0, 0.0, 1.0, 1.0]  # the paper's grader: the paper's verdicts
    assert verify("The final answer is 97.", "97", "sound", truncated=True).form == "truncated"
    with pytest.raises(ValueError, match="3 cut-off flags for 4 completions"):
        verify_batch(completions, ["97"] * 4, "sound", num_workers=0, truncated=[True] * 3)


def test_the_reward_function_takes_the_callers_word_and_says_when_it_cannot_tell():
    reward = make_math_reward_func("sound")
    logged = {}
    args = (["The final answer is 97."] * 2,)
    kwargs = {"answer": ["97"] * 2, "log_metric": logged.__setitem__}
    assert reward(*args, truncated=[False, True], completion_ids=[[1], [1]], **kwargs) == [1.0, 0.0]
    assert logged["math_reward_sound/truncated_frac"] == 0.5 and reward.last_truncated == [False, True]
    with pytest.warns(UserWarning, match="pass max_completion_length= and stop_token_ids="):
        assert reward(*args, completion_ids=[[1], [1]], **kwargs) == [1.0, 1.0]  # nobody said: not refused
    paper = make_math_reward_func("paper")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the paper's grader pays cut-off answers: nothing to warn about
        assert paper(*args, completion_ids=[[1], [1]], **kwargs) == [1.0, 1.0]


# ----------------------------------------------------------------------------------------- through training
def finish_length(prompt_length: int, loop_length: int) -> int:
    """Tokens the looping model (with ``eos``) writes after a prompt of ``prompt_length`` tokens, EOS included."""
    return (loop_length - 1 - prompt_length % loop_length) % loop_length + 1


def two_kinds(tokenizer, loop_length: int, limit: int) -> list[list[dict]]:
    """Two conversational prompts: after the first the loop runs past ``limit`` tokens, after the second its EOS
    comes within it."""
    found = {}
    for i in range(1, 200):
        prompt = [{"role": "user", "content": f"What is {i} + {i}?"}]
        text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        found.setdefault(finish_length(len(ids), loop_length) <= limit, prompt)
        if len(found) == 2:
            return [found[False], found[True]]
    raise AssertionError("no two prompts of each kind")


@pytest.mark.parametrize("fast_sampler", [True, False], ids=["fast-sampler", "trl-generate"])
def test_every_rollout_path_tells_the_grader_which_completions_were_cut_off(
    tmp_path, tiny_tokenizer, fast_sampler
):
    """A rollout of the looping model through the fast sampler (its finish reasons) and TRL's generate (the token
    count and EOS): every reward function gets `truncated` as the rule says, the sound grader refuses exactly
    those, and the monitor counts them (metrics.jsonl, samples/rollouts.jsonl)."""
    from datasets import Dataset

    from pacs_rl.models import tiny_random_model
    from pacs_rl.run_folder import METRICS_FILE, read_jsonl
    from pacs_rl.training import PACSConfig, PACSTrainer
    from pacs_rl.training.output import MetricsJsonlCallback

    limit, eos = 12, tiny_tokenizer.eos_token_id
    model, loop = looping(tiny_random_model(tiny_tokenizer), tiny_tokenizer, LOOP.strip(), eos=True)
    data = Dataset.from_list(
        [{"prompt": p, "answer": "97"} for p in two_kinds(tiny_tokenizer, len(loop), limit) * 16]
    )
    seen = []

    def spy(completions, completion_ids, truncated, **kw):
        seen.append((completion_ids, truncated))
        return [0.0] * len(completions)

    sound = make_math_reward_func("sound")
    overrides = dict(fast_sampler=fast_sampler, max_completion_length=limit, reward_weights=[1.0, 0.0])
    trainer = PACSTrainer(
        model, [sound, spy], args=PACSConfig(**tiny_run_kwargs(tmp_path, **overrides)), train_dataset=data,
        processing_class=tiny_tokenizer, callbacks=[MetricsJsonlCallback()],
    )  # fmt: skip
    trainer.train()
    ((ids, flags),) = seen  # one rollout serves both steps
    assert flags == [len(c) >= limit and c[-1] != eos for c in ids]
    assert any(flags) and not all(flags), flags  # both kinds were drawn: the check can fail either way
    if fast_sampler:  # the sampler's own finish reasons decided
        assert [r == "length" for r in trainer.fast_sampler.finish[1]] == flags
    verdicts = sound.last_result.verdicts
    assert [v.reason == "truncated" for v in verdicts] == flags
    assert not any(v.score for v, cut in zip(verdicts, flags, strict=True) if cut)
    (logged,) = [r for r in read_jsonl(tmp_path / METRICS_FILE) if "answers/cut_off_frac" in r]
    assert logged["answers/cut_off_frac"] == pytest.approx(sum(flags) / len(flags))
    rows = [json.loads(x) for x in (tmp_path / "samples" / "rollouts.jsonl").read_text().splitlines()]
    assert [r["truncated"] for r in rows] == flags and trainer.answer_monitor.totals()["paid_cut_off"] == 0
    _check_engine_evaluation(trainer, loop, limit)


def _check_engine_evaluation(trainer, loop, limit):
    """The held-out evaluation through the trainer's engine: the reward function is told which samples were cut
    off (as the loop's arithmetic says), and the result counts them."""
    from pacs_rl.data import Problem, encode_prompts
    from pacs_rl.training.heldout import engine_accuracy

    candidates = [Problem(id=str(i), problem=f"What is {i} + {i}?", answer="97") for i in range(1, 400, 7)]
    lengths = [len(p) for p in encode_prompts(trainer.processing_class, candidates)]
    cut = [finish_length(n, len(loop)) > limit for n in lengths]
    kinds = list(zip(candidates, cut, strict=True))
    problems = [p for p, c in kinds if c][:3] + [p for p, c in kinds if not c][:3]
    expected = [True] * 3 + [False] * 3
    told = []

    def reward(completions, truncated, **kw):
        told.extend(truncated)
        return [1.0] * len(completions)  # every sample paid: the cut-off ones are counted beside

    result = engine_accuracy(trainer, problems, 1.0, 1.0, limit, reward, 4, seed=0)
    assert told == expected and any(expected) and not all(expected), expected
    assert result["paid_cut_off"] == sum(expected) and result["truncated_frac"] == sum(expected) / len(
        expected
    )


@pytest.mark.parametrize("limit", [23, 40])
def test_held_out_accuracy_under_the_training_grader_pays_no_cut_off_loop(tiny_tokenizer, limit):
    """The held-out pass on the local model (the fast sampler, greedy): the looping model never stops; the sound
    grader pays none of its answers, the paper's grader pays some, counted as cut off."""
    from pacs_rl.data import Problem
    from pacs_rl.models import tiny_random_model
    from pacs_rl.training.heldout import heldout_accuracy

    model, _ = looping(tiny_random_model(tiny_tokenizer), tiny_tokenizer, LOOP)
    problems = [Problem(id=str(i), problem=f"What is {i} + {i}?", answer="97") for i in range(1, 9)]
    results = {
        grader: heldout_accuracy(model, tiny_tokenizer, problems, limit, reward_func=make_math_reward_func(grader),
                                 progress=False)
        for grader in ("sound", "paper")
    }  # fmt: skip
    sound, paper = results["sound"], results["paper"]
    assert all(r["finish_reason"] == "length" and r["reason"] == "truncated" for r in sound["samples"])
    assert sound["correct"] == sound["paid_cut_off"] == 0
    assert 0 < paper["correct"] == paper["paid_cut_off"]  # the paper's verdicts, the cut-off ones counted
    assert {r["completion"] for r in paper["samples"]} == {r["completion"] for r in sound["samples"]}


# ------------------------------------------------------------------------------------------------------ verl
def test_the_verl_rows_cut_off_decision_without_verl():
    """verl pads each response to the configured length and marks its valid tokens in the attention mask's tail:
    cut off iff every position is valid and the last token is no EOS."""
    eos, pad = 2, 0
    mask = lambda prompt, valid, width: [0, 1, 1][:prompt] + [1] * valid + [0] * (width - valid)  # noqa: E731
    assert response_cut_off([5, 6, 7, 8], mask(3, 4, 4), {eos})  # ran to the limit
    assert not response_cut_off([5, 6, 7, eos], mask(3, 4, 4), {eos})  # EOS as its last allowed token
    assert not response_cut_off([5, 6, eos, pad], mask(3, 3, 4), {eos})  # stopped early
    assert not response_cut_off(
        [5, 6, 7, pad], mask(3, 3, 4), {eos}
    )  # stopped short of the limit (a stop string)
    assert response_cut_off(
        torch.tensor([5, 6, 7, 8]), torch.tensor(mask(2, 4, 4)), {eos}, max_response_length=4
    )
    assert not response_cut_off([5, 6, 7, 8], mask(3, 4, 4), {eos}, max_response_length=6)  # a longer limit


def test_the_verl_reward_refuses_a_response_its_manager_marks_cut_off():
    info = {"question": "What is 90 + 7?"}
    answer = "The final answer is 97."
    assert compute_score("arith", answer, "97", {**info, "truncated": False}) == 1.0
    assert compute_score("arith", answer, "97", {**info, "truncated": True}) == 0.0
    assert compute_score("arith", answer, "97", {**info, "truncated": True}, grader="paper") == 1.0


def test_the_runs_summary_counts_the_cut_off_answers_a_paper_run_paid():
    from types import SimpleNamespace

    from pacs_rl.training.cli import summary_lines

    held = {w: {"n": 20, "accuracy": 0.1, "truncated_frac": 0.4, "paid_cut_off": k} for w, k in (("before", 2),
            ("after", 1))}  # fmt: skip
    forms = {"grader": "paper", "completions": 384, "paid": 24, "paid_forms": {"plain": 20, "truncated": 4},
             "cut_off": 150, "paid_cut_off": 4}  # fmt: skip
    result = SimpleNamespace(
        heldout=held, eval_description="greedy", answer_forms=forms, heldout_protocol={"max_new_tokens": 96},
        rollout_truncated_frac=0.39, device=None, first_step=0, max_steps=8, global_step=8, already_complete=False,
        train_seconds=60.0, output_dir=Path("runs/x"), metrics_file="m", curves_png=None, final_dir="f",
    )  # fmt: skip
    lines = summary_lines(result)
    assert (
        "held-out answers paid though cut off at the 96-token limit: before 2, after 1 (the paper grader pays "
        in ("\n".join(lines))
    )
    assert (
        "completions cut off at the token limit in training: 150 of 384 (4 of them paid by the paper grader)"
        in lines
    )
