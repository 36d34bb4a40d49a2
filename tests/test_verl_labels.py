"""The label codes of the verl integration (no verl needed): a down-cast between the estimator and the loss
either leaves a code intact or is refused; it never flips a label or moves a row to another group."""

from __future__ import annotations

import pytest
import torch

from pacs_rl.integrations.verl.labels import MAX_GROUPS, decode_labels, encode_labels

N_GROUPS = 1100  # codes up to 4·1099 + 3 = 4399: past bf16's exact range (256) and fp16's (2048)


def _codes():
    group_ids = torch.arange(N_GROUPS).repeat_interleave(2)
    rewards = torch.tensor([0.0, 1.0]).repeat(N_GROUPS)
    mask = torch.ones(2 * N_GROUPS, 3)
    mask[::3, 2] = 0  # ragged rows: padding holds 0
    return rewards, group_ids, mask, encode_labels(rewards, group_ids, mask)


def test_codes_round_trip_and_padding_rows_get_no_group():
    rewards, group_ids, mask, adv = _codes()
    assert adv.dtype == torch.float32
    assert adv[3, 0].item() == 4 * 1 + 2 * 1 + 1  # row 3: group 1, R = 1
    decoded, groups = decode_labels(adv, mask)
    assert torch.equal(decoded, rewards) and torch.equal(groups, group_ids)
    padded = torch.cat([adv, torch.zeros(2, 3)])
    _, groups = decode_labels(padded, torch.cat([mask, torch.zeros(2, 3)]))
    assert groups[-2:].tolist() == [-1, -1]
    decoded64, _ = decode_labels(adv.double(), mask)
    assert torch.equal(decoded64, rewards.double())


@pytest.mark.parametrize(("dtype", "exact_up_to"), [(torch.bfloat16, 256), (torch.float16, 2048)])
def test_a_round_trip_through_a_narrow_float_never_decodes_to_a_wrong_label(dtype, exact_up_to):
    rewards, group_ids, mask, adv = _codes()
    trip = adv.to(dtype).to(torch.float32)  # cast down and back: the tensor is float32 again
    changed = (trip != adv).any(dim=1)
    first = adv[:, 0]
    assert not changed[first < exact_up_to].any()  # small codes survive ...
    assert changed[first > exact_up_to].all()  # ... every larger (odd) code is rounded
    intact = ~changed
    decoded, groups = decode_labels(trip[intact], mask[intact])
    assert torch.equal(decoded, rewards[intact]) and torch.equal(groups, group_ids[intact])
    for row in changed.nonzero()[:, 0].tolist():  # each rounded row alone is refused, naming the cause
        with pytest.raises(ValueError, match="even"):
            decode_labels(trip[row : row + 1], mask[row : row + 1])


def test_the_loss_refuses_advantages_in_a_narrow_dtype_and_foreign_advantages():
    _, _, mask, adv = _codes()
    with pytest.raises(ValueError, match=r"dtype torch\.bfloat16.*float32"):
        decode_labels(adv[:4].to(torch.bfloat16), mask[:4])
    grpo_like = torch.tensor([[0.7071, 0.7071, 0.7071]])
    with pytest.raises(ValueError, match=r"not PACS label codes.*adv_estimator=pacs"):
        decode_labels(grpo_like, torch.ones(1, 3))
    uneven = adv[:1].clone()
    uneven[0, 1] += 4  # two codes in one row
    with pytest.raises(ValueError, match="not PACS label codes"):
        decode_labels(uneven, mask[:1])


def test_group_ids_beyond_float32s_exact_range_are_refused():
    assert 4 * (MAX_GROUPS - 1) + 3 < 2**24 <= 4 * MAX_GROUPS + 3
    with pytest.raises(ValueError, match=r"smaller data\.train_batch_size"):
        encode_labels(torch.zeros(1), torch.tensor([MAX_GROUPS]), torch.ones(1, 2))


def test_the_verl_reward_pays_the_training_grader_with_the_rows_question():
    """No verl needed: the reward function and the rows it reads. A row carries its question, so the sound grader
    refuses the question given back, which math-verify (the paper's grader) pays."""
    from pacs_rl.data import Problem
    from pacs_rl.integrations.verl.data import to_verl_rows
    from pacs_rl.integrations.verl.reward import compute_score

    (row,) = to_verl_rows([Problem(id="a", problem="What is 47 + 8?", answer="55")], "arith")
    info, gold = row["extra_info"], row["reward_model"]["ground_truth"]
    assert info["question"] == "What is 47 + 8?"
    assert compute_score("arith", r"So the answer is \boxed{55}.", gold, info) == 1.0
    assert compute_score("arith", r"\boxed{8 + 47}", gold, info) == 0.0
    assert compute_score("arith", r"\boxed{8 + 47}", gold, info, grader="paper") == 1.0
    assert compute_score("arith", "47 + 8 = 55", gold, info) == 1.0  # a plain right last line is an answer
    assert compute_score("arith", "40 + 8 = 55", gold, info) == 0.0  # a false final statement is not
