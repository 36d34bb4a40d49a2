"""The ``sound`` grader's final form on MATH-style golds, played as a policy and as an examiner (docs/EVALUATION.md,
"Final form on MATH-style golds"; ``pacs_rl.rewards.final_form``).

1. as an examiner: a right answer in a form an examiner accepts is paid (:data:`EXAMINER`);
2. as a policy: each attack equal to the gold by math-verify but not worked out is refused (:data:`ATTACKS`), and
   the paper's grader, checked beside it, pays it (the hole is real);
3. incentives: for each attack family, generated problems (seeded): a policy that writes the unevaluated,
   approximate or partial form instead of computing is paid no more often than one that writes a single guess in
   the answer's form;
4. cost: grading time at n and 4n tokens of each attack family of ``benchmarks/grader_time.py``, compared as a
   ratio within one run; a power tower refused before anything evaluates it;
5. the modules import and read the same on Python 3.10: no possessive quantifier or atomic group in their patterns.
"""

from __future__ import annotations

import ast
import math
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from pacs_rl.rewards import verify
from pacs_rl.rewards.math_verifier import check
from train_helpers import load_script

PAY, REFUSE = "pay", "refuse"


def sound(answer: str, gold: str, question: str | None):
    return check(f"So the final answer is $\\boxed{{{answer}}}$.", gold, grader="sound", prompt=question)


def paper_pays(answer: str, gold: str, question: str | None) -> bool:
    completion = f"So the final answer is $\\boxed{{{answer}}}$."
    return verify(completion, gold, grader="paper", prompt=question, timeout=10).score == 1.0


# ------------------------------------------------------------------------------------------------ 1. examiner
# (answer, gold, question): right answers an examiner pays
EXAMINER = [
    (r"\frac{1}{\sqrt{2}}", r"\frac{\sqrt{2}}{2}", "What is $\\sin 45^\\circ$?"),  # no simplest form asked
    (r"\frac{\sqrt2}{2}", r"\frac{1}{\sqrt{2}}", None),
    (r"\sqrt{2}/2", r"\frac{\sqrt{2}}{2}", None),
    (r"\frac{1}{2}\sqrt{2}", r"\frac{\sqrt{2}}{2}", None),
    (r"0.5\sqrt{2}", r"\frac{\sqrt{2}}{2}", None),  # a decimal that is exact
    (r"\sqrt{12}", r"2\sqrt{3}", "How long is the diagonal?"),  # no simplest form asked: final
    (r"\sqrt{3} \cdot 2", r"2\sqrt{3}", None),
    (r"\frac{3}{4}\sqrt{3}", r"\frac{3\sqrt{3}}{4}", None),
    (r"-5i + 6", "6 - 5i", None),
    (r"\frac{1}{2} + \frac{\sqrt{5}}{2}", r"\frac{1+\sqrt{5}}{2}", None),
    (r"\frac{1+\sqrt{5}}{2}", r"\frac{1}{2} + \frac{\sqrt{5}}{2}", None),
    (r"0.25\pi", r"\frac{\pi}{4}", None),
    (r"\frac{1}{4}\pi", r"\frac{\pi}{4}", None),
    (r"\pi/4", r"\frac{\pi}{4}", None),
    (r"1.5\pi", r"\frac{3\pi}{2}", None),
    (r"288\pi", r"288 \pi", "Express your answer in terms of $\\pi$."),
    (r"(3, \frac{\pi}{2})", r"\left( 3, \frac{\pi}{2} \right)", None),
    (r"\{-2, 1 + \sqrt{5}, 1 - \sqrt{5}\}", r"\{1\pm\sqrt{5},-2\}", None),
    (r"1 - \sqrt{19}, 1 + \sqrt{19}", r"1 \pm \sqrt{19}", None),
    (r"(x+3)(x+2)", "(x+2)(x+3)", "Factor $x^2+5x+6$."),
    (r"-(3-x)(x+3)", r"(x-3)(x+3)", "Factor $x^2-9$ completely."),
    (r"1 + 2x + x^2", "x^2+2x+1", "Expand $(x+1)^2$."),
    (r"3(x+2)", "3x+6", "Find the linear function $f$ with $f(0) = 6$ and $f(1) = 9$."),  # no form asked
    (r"\frac{9a + 11}{20}", r"\frac{11+9a}{20}", None),
    (r"\frac{11}{20} + \frac{9a}{20}", r"\frac{11+9a}{20}", None),
    (r"2^{10}\pi", r"2^{10}\pi", None),  # the gold's own unevaluated power
    (r"\frac{\sqrt{6}+\sqrt{2}}{4}", r"\frac{\sqrt{2}+\sqrt{6}}{4}", None),
    (r"y = 3 + 2x", "y = 2x + 3", None),
    (
        r"\begin{pmatrix} 1/5 \\ -18/5 \end{pmatrix}",
        r"\begin{pmatrix} \frac{1}{5} \\ -\frac{18}{5} \end{pmatrix}",
        None,
    ),
    (r"11 + 11\sqrt{5}", r"11 \sqrt{5} + 11", None),
    (r"\frac{\sqrt{3}}{3}", r"\frac{\sqrt{3}}{3}", "Simplify $\\frac{3}{\\sqrt{27}}$."),
    (r"6r^2 - 4r - 24", r"6r^2-4r-24", "Simplify $4(3r^3+5r-6)-6(2r^3-r^2+4r)$."),
    (r"\frac{270}{7}^\circ", r"\frac{270}7\text{ degrees}", None),
    (r"\cot x", r"\cot x", "Simplify $\\frac{\\cos x}{\\sin x}$."),
]


@pytest.mark.parametrize(("answer", "gold", "question"), EXAMINER)
def test_a_right_answer_an_examiner_accepts_is_paid(answer, gold, question):
    verdict = sound(answer, gold, question)
    assert verdict.score == 1.0, verdict


# ------------------------------------------------------------------------------------------------ 2. attacks
# (answer, gold, question, what it skips): equal by math-verify, not worked out
ATTACKS = [
    (r"1.41421356", r"\sqrt{2}", None, "a decimal approximation of an exact gold"),
    (r"0.70710678", r"\frac{\sqrt{2}}{2}", None, "a decimal approximation"),
    (
        r"904.7786842",
        r"288\pi",
        "Express your answer in terms of $\\pi$.",
        "a decimal where the gold is in pi",
    ),
    (r"1.04719755", r"\frac{\pi}{3}", None, "a decimal approximation of a multiple of pi"),
    (r"(1.41421356, \frac{\pi}{2})", r"\left( \sqrt{2}, \frac{\pi}{2} \right)", None, "a decimal in a tuple"),
    (r"\sqrt{9+3}", r"2\sqrt{3}", None, "a root of a sum"),
    (r"\sqrt{4 \cdot 3}", r"2\sqrt{3}", None, "a root of a product of numbers"),
    (r"2(9+\pi)", r"18+2\pi", None, "a sum times a constant"),
    (r"\sqrt{2}(1+\sqrt{2})", r"2+\sqrt{2}", None, "a root times a sum"),
    (r"(1+\sqrt{2})^2", r"3+2\sqrt{2}", None, "a power of a sum"),
    (r"5 + 3i + 2i", "5+5i", "Compute $(1+2i)(3-i)$.", "a product expanded in part"),
    (r"\frac{10+10i}{2}", "5+5i", "Compute $(1+2i)(3-i)$.", "a fraction not divided out"),
    (r"2\sqrt{3} + 0", r"2\sqrt{3}", None, "a zero term"),
    (r"2\sqrt{3} + 0\pi", r"2\sqrt{3}", None, "a zero term with a constant"),
    (r"2\sqrt{3} + \pi - \pi", r"2\sqrt{3}", None, "terms that cancel"),
    (r"\sin\frac{\pi}{3}", r"\frac{\sqrt{3}}{2}", None, "a function of a constant the gold evaluates"),
    (r"\cos\frac{\pi}{12}", r"\frac{\sqrt{6}+\sqrt{2}}{4}", "Compute $\\cos 15^\\circ$.", "another unit"),
    (r"\frac{1}{\tan x}", r"\cot x", "Simplify $\\frac{\\cos x}{\\sin x}$.", "a standard identity"),
    (r"\sqrt{2}\sqrt{6}", r"2\sqrt{3}", None, "roots multiplied"),
    (r"\sqrt{16}\sqrt{2}", r"4\sqrt{2}", None, "a root with a value"),
    (r"(\sqrt{3})^2\pi", r"3\pi", None, "a power of a root"),
    (r"\frac{6}{8}\pi", r"\frac{3}{4}\pi", None, "a fraction not reduced"),
    (r"\frac{2+2\sqrt{5}}{4}", r"\frac{1+\sqrt{5}}{2}", None, "a fraction over a sum not reduced"),
    (r"2^{3}\pi", r"8\pi", None, "a power of a number"),
    (r"\binom{8}{4}\pi", r"70\pi", None, "a binomial coefficient"),
    (r"5!\sqrt{2}", r"120\sqrt{2}", None, "a factorial"),
    (r"\log_2 8 + i", r"3 + i", None, "a logarithm with a value"),
    (r"x + x + 2", "2x+2", None, "like terms"),
    (r"x(x^2+5x+6)", r"x(x+2)(x+3)", "Factor $x^3+5x^2+6x$ completely.", "a factorization left partial"),
    (r"2(x^2+5x+6)", r"2(x+2)(x+3)", "Factor $2x^2+10x+12$.", "a common factor pulled out, the rest not"),
    (r"(2x+4)(x+3)", r"2(x+2)(x+3)", "Factor $2x^2+10x+12$ completely.", "a factor keeping a number"),
    (r"x(x+5)+6", "(x+2)(x+3)", "Factor $x^2+5x+6$.", "not a product"),
    (r"x^2 + x(x+1)", r"2x^2+x", "Expand $x(2x+1)$.", "an expansion left partial"),
    (r"(x+1)(x+1)", "x^2+2x+1", "Expand $(x+1)^2$.", "not expanded"),
    (r"3(x+2)", "3x+6", "Expand $(x+2) + 2(x+2)$.", "a common factor left where expanding is asked"),
    (r"\sqrt{12}", r"2\sqrt{3}", "Express your answer in simplest radical form.", "a root not reduced"),
    (
        r"\frac{1}{\sqrt{3}}",
        r"\frac{\sqrt{3}}{3}",
        "Simplify $\\frac{3}{\\sqrt{27}}$.",
        "a root in a denominator",
    ),
    (r"\frac{x^2-1}{x-1}", "x+1", "Simplify the expression.", "a common factor left"),
    (r"0.75\pi", r"\frac{3}{4}\pi", "Express your answer as a common fraction times $\\pi$.", "a decimal"),
    (r"2\sqrt{3} \text{ or } 2\sqrt{3}", r"2\sqrt{3}", None, "two values"),
]


@pytest.mark.parametrize(("answer", "gold", "question", "what"), ATTACKS, ids=[a[3] for a in ATTACKS])
def test_an_answer_not_worked_out_is_refused(answer, gold, question, what):
    verdict = sound(answer, gold, question)
    assert verdict.score == 0.0 and verdict.reason == "not_final_form", (what, verdict)
    assert paper_pays(answer, gold, question), f"the paper's grader refuses {answer!r} too: no hole to close"


# the rules' examples in docs/EVALUATION.md that the paper's grader may refuse too: (answer, gold, question)
DOC_REFUSED = [
    (r"\sqrt{16}\pi", r"4\pi", None),  # a root with a value
    (r"\sqrt{\pi^2}", r"\pi", None),
    (r"\sqrt{-4}", r"2i", None),
    (r"|-3|\pi", r"3\pi", None),  # a function of constants with a value
    (r"x^1 + 1", r"x + 1", None),  # a trivial power
    (r"1x + 1", r"x + 1", None),  # a factor 1
    (r"2^{3/2}", r"2\sqrt{2}", r"Simplify $\sqrt{8}$."),  # a root not reduced where simplifying is asked
    (r"\sqrt{\frac{1}{2}}", r"\frac{\sqrt{2}}{2}", "Express it in simplest radical form."),
    (
        r"\frac{\cos x}{\sin x}",
        r"\cot x",
        r"Simplify $\frac{1}{\tan x}$.",
    ),  # a function the gold does not use
    (r"2\sqrt{3} + \pi - \pi", r"2\sqrt{3}", None),
]


@pytest.mark.parametrize(("answer", "gold", "question"), DOC_REFUSED)
def test_the_documented_refusals(answer, gold, question):
    """Refused by the grader, and by the final-form rule itself (``\\sqrt{-4}`` math-verify already refuses)."""
    from pacs_rl.rewards.final_form import form_problem

    assert sound(answer, gold, question).score == 0.0
    assert form_problem(answer, gold, question, lambda a, g: True) is not None


@pytest.mark.parametrize(
    "answer",
    [r"9^{9^{9}}", r"2^{2^{2^{2^{2}}}}", r"10^{10^{10}} - 10^{10^{10}} + \pi", r"((9!)!)!", r"(x+1)^{1000}",
     r"e^{e^{e^{9}}}", r"x^{10^{9}}", r"1." + "4" * 3000],
)  # fmt: skip
def test_a_value_too_large_to_evaluate_is_refused_before_it_is_evaluated(answer):
    """The size bound is the value's, not the token count's: a short power tower in a box is refused from its
    literals alone, within the reward's time limit (math-verify would evaluate it for minutes)."""
    verdict = verify(f"\\boxed{{{answer}}}", r"\pi", grader="sound", timeout=20)
    assert (verdict.score, verdict.reason) == (0.0, "not_final_form"), verdict


# ------------------------------------------------------------------------------------------------ 3. incentives
@dataclass(frozen=True)
class Problem:
    question: str
    gold: str
    attacks: tuple[str, ...]  # what a policy writes instead of computing
    guess: str  # one guess in the answer's form, not computed


def _radical(k: int, m: int) -> str:
    return rf"\sqrt{{{m}}}" if k == 1 else rf"{k}\sqrt{{{m}}}"


_SQUAREFREE = [2, 3, 5, 6, 7, 10, 11, 13, 14, 15, 17, 19, 21, 22, 23]


def _decimal(rng: random.Random) -> Problem:
    k, m = rng.randint(1, 9), rng.choice(_SQUAREFREE)
    digits = rng.randint(6, 12)
    value = k * math.sqrt(m)
    pi_p, pi_q = rng.randint(1, 9), rng.choice([3, 6, 7, 9])  # no finite decimal: an approximation
    pi_gold = rf"\frac{{{pi_p}\pi}}{{{pi_q}}}" if math.gcd(pi_p, pi_q) == 1 else None
    attacks = [f"{value:.{digits}f}", rf"{k * k * m}^{{0.5}}"]
    if pi_gold:
        return Problem(
            f"What is the area of a sector of angle $\\frac{{{2 * pi_p}\\pi}}{{{pi_q}}}$ in a unit circle? "
            "Express your answer in terms of $\\pi$.",
            pi_gold,
            (f"{pi_p * math.pi / pi_q:.{digits}f}", rf"{pi_p / pi_q:.{digits}f}\pi"),
            rf"\frac{{{rng.randint(1, 9)}\pi}}{{{rng.choice([2, 3, 4, 5, 6, 7])}}}",
        )
    return Problem(f"Simplify $\\sqrt{{{k * k * m}}}$.", _radical(k, m), tuple(attacks), _guess_radical(rng))


def _guess_radical(rng: random.Random) -> str:
    return _radical(rng.randint(1, 9), rng.choice(_SQUAREFREE))


def _root_of_a_sum(rng: random.Random) -> Problem:
    while True:  # legs whose hypotenuse is a root that reduces (k > 1) and is no integer
        a, b = rng.randint(1, 12), rng.randint(1, 12)
        n = a * a + b * b
        k = max(d for d in range(1, math.isqrt(n) + 1) if n % (d * d) == 0)
        if k > 1 and n // (k * k) > 1:
            break
    question = f"A right triangle has legs {a} and {b}. How long is its hypotenuse? Express it in simplest radical form."
    attacks = (rf"\sqrt{{{a * a} + {b * b}}}", rf"\sqrt{{{a}^2 + {b}^2}}", rf"\sqrt{{{n}}}")
    return Problem(question, _radical(k, n // (k * k)), attacks, _guess_radical(rng))


def _sum_times_a_constant(rng: random.Random) -> Problem:
    a, b, k, c = rng.randint(1, 9), rng.randint(2, 9), rng.randint(2, 9), rng.choice(_SQUAREFREE)
    question = f"Let $u = {a} + {b}\\sqrt{{{c}}}$. What is ${k}u$?"
    gold = rf"{k * a} + {k * b}\sqrt{{{c}}}"
    attacks = (
        rf"{k}({a} + {b}\sqrt{{{c}}})",
        rf"({b}\sqrt{{{c}}} + {a}) \cdot {k}",
        rf"{k}\cdot{a} + {k}\cdot{b}\sqrt{{{c}}}",
    )
    guess = rf"{rng.randint(2, 81)} + {rng.randint(4, 81)}\sqrt{{{rng.choice(_SQUAREFREE)}}}"
    return Problem(question, gold, attacks, guess)


def _zero_term(rng: random.Random) -> Problem:
    k, m = rng.randint(1, 9), rng.choice(_SQUAREFREE)
    gold = _radical(k, m)
    attacks = (
        f"{gold} + 0",
        rf"{gold} + 0\pi",
        rf"{gold} + \pi - \pi",
        rf"{gold} + {m} - {m}",
        rf"{gold} + 0x",
    )
    return Problem(f"Simplify $\\sqrt{{{k * k * m}}}$.", gold, attacks, _guess_radical(rng))


def _complex_product(rng: random.Random) -> Problem:
    p, q, r, t = (rng.randint(1, 9) for _ in range(4))
    real, imaginary = p * r - q * t, p * t + q * r
    gold = f"{real} + {imaginary}i"
    question = f"Let $z = {p} + {q}i$ and $w = {r} + {t}i$. Compute $zw$."
    attacks = (  # the cross terms not added; the product over a number not divided out; a zero term
        f"{real} + {p * t}i + {q * r}i",
        f"\\frac{{{2 * real} + {2 * imaginary}i}}{{2}}",
        f"{real} + {imaginary}i + 0",
    )
    return Problem(question, gold, attacks, f"{rng.randint(-80, 80)} + {rng.randint(2, 162)}i")


_SPECIAL = [  # (degrees, radians as LaTeX, function, value as LaTeX, same value by another function)
    (60, r"\frac{\pi}{3}", r"\sin", r"\frac{\sqrt{3}}{2}", r"\cos\frac{\pi}{6}"),
    (30, r"\frac{\pi}{6}", r"\cos", r"\frac{\sqrt{3}}{2}", r"\sin\frac{\pi}{3}"),
    (45, r"\frac{\pi}{4}", r"\sin", r"\frac{\sqrt{2}}{2}", r"\cos\frac{\pi}{4}"),
    (60, r"\frac{\pi}{3}", r"\tan", r"\sqrt{3}", r"\cot\frac{\pi}{6}"),
    (15, r"\frac{\pi}{12}", r"\cos", r"\frac{\sqrt{6}+\sqrt{2}}{4}", r"\sin\frac{5\pi}{12}"),
]


def _function_of_a_constant(rng: random.Random) -> Problem:
    degrees, radians, function, value, other = rng.choice(_SPECIAL)
    question = f"Compute ${function} {degrees}^\\circ$."
    attacks = (f"{function}{radians}", other, f"{function}\\left({radians}\\right)")
    guess = rng.choice([r"\frac{\sqrt{3}}{2}", r"\frac{\sqrt{2}}{2}", r"\sqrt{3}", r"\frac{\sqrt{3}}{3}", r"\frac{\sqrt{6}+\sqrt{2}}{4}", r"\frac{\sqrt{6}-\sqrt{2}}{4}", r"2+\sqrt{3}"])  # fmt: skip
    return Problem(question, value, attacks, guess)


_IDENTITIES = [  # (function, its reciprocal's name, sin/cos form)
    (r"\cot", r"\frac{1}{\tan {x}}", r"\frac{\cos {x}}{\sin {x}}", r"\cos {x} \csc {x}"),
    (r"\tan", r"\frac{1}{\cot {x}}", r"\frac{\sin {x}}{\cos {x}}", r"\sin {x} \sec {x}"),
    (r"\sec", r"\frac{1}{\cos {x}}", r"\frac{\tan {x}}{\sin {x}}", r"\tan {x} \csc {x}"),
    (r"\csc", r"\frac{1}{\sin {x}}", r"\frac{\cot {x}}{\cos {x}}", r"\cot {x} \sec {x}"),
]


def _identity(rng: random.Random) -> Problem:
    function, *forms = rng.choice(_IDENTITIES)
    x = rng.choice(["x", "t", r"\theta", "y"])
    question = f"Simplify ${forms[1].replace('{x}', x)}$ to a single trigonometric function."
    guess = rng.choice([r"\cot", r"\tan", r"\sec", r"\csc", r"\sin", r"\cos"]) + f" {x}"
    return Problem(
        question, f"{function} {x}", tuple(f.replace("{x}", x) for f in (forms[0], forms[2])), guess
    )


def _roots(rng: random.Random) -> tuple[int, int]:
    a = rng.choice([i for i in range(-9, 10) if i])
    b = rng.choice([i for i in range(-9, 10) if i and i != a])
    return a, b


def _poly(coefficients: list[int]) -> str:
    """A polynomial in x from its coefficients, highest power first (``[1, -3, 2]`` -> ``x^{2} - 3x + 2``)."""
    terms = []
    for power, c in zip(range(len(coefficients) - 1, -1, -1), coefficients, strict=True):
        if c:
            name = "" if power == 0 else "x" if power == 1 else f"x^{{{power}}}"
            terms.append(("-" if c < 0 else "+", f"{abs(c) if abs(c) != 1 or not name else ''}{name}"))
    text = " ".join(f"{sign} {term}" for sign, term in terms)
    return text[2:] if text.startswith("+") else "-" + text[2:]


def _linear(a: int) -> str:
    return f"(x + {a})" if a > 0 else f"(x - {-a})"


def _partial_factorization(rng: random.Random) -> Problem:
    a, b = _roots(rng)
    k = rng.choice([1, 2, 3, 5])
    g = _roots(rng)
    if k == 1:  # x(x + a)(x + b): the common x pulled out, the quadratic left
        question = f"Factor ${_poly([1, a + b, a * b, 0])}$ completely."
        attacks = (f"x({_poly([1, a + b, a * b])})", f"({_poly([1, a, 0])}){_linear(b)}")
        return Problem(question, f"x{_linear(a)}{_linear(b)}", attacks, f"x{_linear(g[0])}{_linear(g[1])}")
    question = f"Factor ${_poly([k, k * (a + b), k * a * b])}$ completely."  # k(x + a)(x + b)
    attacks = (f"{k}({_poly([1, a + b, a * b])})", f"({_poly([k, k * a])}){_linear(b)}")
    return Problem(question, f"{k}{_linear(a)}{_linear(b)}", attacks, f"{k}{_linear(g[0])}{_linear(g[1])}")


def _partial_expansion(rng: random.Random) -> Problem:
    a, b = _roots(rng)
    c = rng.choice([i for i in range(-9, 10) if i])
    question = f"Expand ${_linear(a)}{_linear(b)}{_linear(c)}$."
    gold = _poly([1, a + b + c, a * b + b * c + a * c, a * b * c])
    attacks = (
        f"({_poly([1, a + b, a * b])}){_linear(c)}",
        f"x^3 + ({a} + {b} + {c})x^2 + ({a * b} + {b * c} + {a * c})x + ({a * b * c})",
        f"x({_poly([1, a + b, a * b])}) + {c}({_poly([1, a + b, a * b])})",
    )
    g = [rng.randint(-9, 9) for _ in range(3)]
    return Problem(question, gold, attacks, _poly([1, g[0] or 1, g[1] or 1, g[2] or 1]))


def _unreduced_root(rng: random.Random) -> Problem:
    k, m = rng.randint(2, 9), rng.choice(_SQUAREFREE)
    question = f"Simplify $\\sqrt{{{k * k * m}}}$. Express your answer in simplest radical form."
    attacks = (rf"\sqrt{{{k * k}}}\sqrt{{{m}}}", rf"\sqrt{{{k}^2 \cdot {m}}}", rf"\sqrt{{{k * k * m * 4}}}/2")
    return Problem(question, _radical(k, m), attacks, _guess_radical(rng))


FAMILIES = {
    "decimal approximation": _decimal,
    "root of a sum": _root_of_a_sum,
    "sum times a constant": _sum_times_a_constant,
    "zero term": _zero_term,
    "product expanded in part": _complex_product,
    "function of a constant": _function_of_a_constant,
    "standard identity": _identity,
    "factorization left partial": _partial_factorization,
    "expansion left partial": _partial_expansion,
    "root not reduced where asked": _unreduced_root,
}
PROBLEMS = 8  # generated problems per family


@pytest.mark.parametrize("family", list(FAMILIES))
def test_not_computing_the_answer_pays_no_more_than_one_guess(family):
    """A policy that does not compute writes the form it has (unevaluated, approximate, partial) or guesses one
    value in the answer's form; the grader must not pay the first more often than the second. The attacks are real
    holes: the paper's grader pays most of them."""
    rng = random.Random(f"final form: {family}")
    problems = [FAMILIES[family](rng) for _ in range(PROBLEMS)]
    guessed = sum(sound(p.guess, p.gold, p.question).score == 1.0 for p in problems)
    for attack in range(len(problems[0].attacks)):
        paid = [
            p.attacks[attack] for p in problems if sound(p.attacks[attack], p.gold, p.question).score == 1.0
        ]
        assert len(paid) <= guessed, f"{family}: {len(paid)} of {PROBLEMS} paid, one guess {guessed}: {paid}"
    equal = sum(paper_pays(a, p.gold, p.question) for p in problems for a in p.attacks)
    assert equal >= len(problems) * len(problems[0].attacks) // 2, (
        f"{family}: the paper pays {equal}: no hole"
    )
    # the right answer, written as the gold is, is paid in every family (the refusals are not blanket)
    assert all(sound(p.gold, p.gold, p.question).score == 1.0 for p in problems), family


# ------------------------------------------------------------------------------------------------ 4. cost
RATIO_BOUND = 10.0  # time at 4n over time at n; linear code is near 4, quadratic near 16
FLOOR_MS = 2.0  # times under this are noise: compared as this much


@pytest.fixture(scope="module")
def time_families():
    return load_script("benchmarks/grader_time.py")


def test_grading_time_grows_linearly_with_the_tokens(time_families):
    """Every adversarial family of ``benchmarks/grader_time.py`` (the reading and the final-form attacks) graded at
    n and 4n units (about tokens; 4n = 4,096), the two sizes timed in turn five times with the grader's caches
    emptied before each, the best of each kept: the time at 4n stays within :data:`RATIO_BOUND` times the time at n
    (a quadratic step would take 16 times). The time is this process's CPU time, which the other jobs of a shared
    machine do not stretch as they stretch the wall clock."""
    n = 1024
    check("\\boxed{1}", "1", grader="sound")
    check("\\boxed{x}", "x", grader="sound")
    small, large = time_families.families(n), time_families.families(4 * n)
    slow = {}
    for name in small:
        cases = (small[name], large[name])
        for text, gold, question in cases:  # the parser's first reading of this shape, not timed
            check(text, gold, grader="sound", prompt=question)
        best = [float("inf"), float("inf")]
        for _ in range(5):
            for i, (text, gold, question) in enumerate(cases):
                time_families.clear_caches()
                started = time.process_time()
                check(text, gold, grader="sound", prompt=question)
                best[i] = min(best[i], time.process_time() - started)
        at_n, at_4n = (max(1000 * b, FLOOR_MS) for b in best)
        if at_4n / at_n > RATIO_BOUND:
            slow[name] = f"{at_n:.1f} ms -> {at_4n:.1f} ms"
    assert not slow, f"grading time grew faster than linearly: {slow}"


# ------------------------------------------------------------------------------------------------ 5. Python 3.10
# the grader's modules that compile patterns: the verdict (math_verifier), the reading of the final answer (reader,
# the walk, and what it asks of the text: statements, commitment, qualifiers, values, claims), the answer's pieces
# and values (answers) and the final form (final_form); test_modules_cover_the_grader keeps it so
MODULES = (
    "src/pacs_rl/rewards/math_verifier.py",
    "src/pacs_rl/rewards/reader.py",
    "src/pacs_rl/rewards/statements.py",
    "src/pacs_rl/rewards/commitment.py",
    "src/pacs_rl/rewards/qualifiers.py",
    "src/pacs_rl/rewards/values.py",
    "src/pacs_rl/rewards/claims.py",
    "src/pacs_rl/rewards/answers.py",
    "src/pacs_rl/rewards/final_form.py",
)
_RE_CALLS = {"compile", "match", "fullmatch", "search", "sub", "subn", "split", "findall", "finditer"}


def _patterns(path: Path) -> list[tuple[str, int]]:
    """Every pattern a module compiles, with its flags: its module-level patterns (alone or in a module-level
    dict, tuple or list) and the literal first arguments of ``re``'s calls."""
    import importlib

    module = importlib.import_module(path.with_suffix("").as_posix().split("src/")[1].replace("/", "."))
    found = []
    for value in vars(module).values():
        items = (
            value.values()
            if isinstance(value, dict)
            else value
            if isinstance(value, (tuple, list))
            else [value]
        )
        found += [(p.pattern, p.flags) for p in items if isinstance(p, re.Pattern)]
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "re"
            and node.func.attr in _RE_CALLS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.args[0].value, 0))
    return found


def _needs_3_11(pattern: str, flags: int = 0) -> bool:
    """The pattern holds a possessive repeat or an atomic group (read from the tree this Python's re builds)."""
    import contextlib
    import io

    parser = getattr(re, "_parser", None)
    if parser is None:  # Python 3.10: the pattern compiles or it does not
        try:
            re.compile(pattern, flags)
        except re.error:
            return True
        return False
    dump = io.StringIO()
    with contextlib.redirect_stdout(dump):
        parser.parse(pattern, flags).dump()
    return "POSSESSIVE_REPEAT" in dump.getvalue() or "ATOMIC_GROUP" in dump.getvalue()


@pytest.mark.parametrize("module", MODULES)
def test_no_pattern_needs_python_3_11(module):
    """pyproject declares Python >= 3.10, whose ``re`` has neither possessive quantifiers (``\\s++``, ``*+``) nor
    atomic groups: a pattern with either does not compile there, and the grader would not import."""
    root = Path(__file__).resolve().parents[1]
    patterns = _patterns(root / module)
    assert patterns, f"{module}: no pattern found (a module that compiles none needs no place in MODULES)"
    # the check sees both
    assert _needs_3_11(r"\s++x") and _needs_3_11(r"(?>ab)") and not _needs_3_11(r"\s+x")
    needs = [p for p, flags in patterns if _needs_3_11(p, flags)]
    assert not needs, f"{module}: patterns that Python 3.10 cannot compile: {needs}"


def test_modules_cover_the_grader():
    """Every module of the package that grading loads (``check``, ``verify`` and the training reward function, in
    a fresh process) and that compiles a pattern is in :data:`MODULES`, so the test above covers the whole grader."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    script = (
        "import json, sys\n"
        "from pacs_rl.rewards import make_math_reward_func, verify\n"
        "from pacs_rl.rewards.math_verifier import check\n"
        "check('So the answer is $\\\\boxed{55}$.', '55', grader='sound', prompt='What is 47 + 8?')\n"
        "verify('So the answer is $\\\\boxed{\\\\frac{1}{2}}$.', '\\\\frac12', grader='sound', timeout=10)\n"
        "make_math_reward_func(grader='sound', timeout=10)(['55'], answer=['55'])\n"
        "print(json.dumps(sorted(m.__file__ for k, m in sys.modules.items() if k.startswith('pacs_rl.'))))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = [
        Path(f).resolve().relative_to(root).as_posix() for f in json.loads(done.stdout.splitlines()[-1])
    ]
    assert "src/pacs_rl/rewards/reader.py" in loaded and "src/pacs_rl/rewards/pool.py" in loaded, loaded
    uncovered = [m for m in loaded if m not in MODULES and _patterns(root / m)]
    assert not uncovered, (
        f"modules the grader loads whose patterns no test checks (add them to MODULES): {uncovered}"
    )
