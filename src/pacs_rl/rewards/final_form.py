"""Final form: an answer to a MATH-style question (a gold that is not a plain number) is paid only when it is
equal to the gold *and* written as a final answer, the way an examiner marks it.

math-verify decides equality by evaluating both sides, so it pays any expression that comes to the gold: the
question's own expression padded with terms that cancel, an unreduced radical, like terms left uncollected. The
rules here refuse those by construction, not by spelling:

- **one value**: an answer of several values joined by "or", "and", a comma or a semicolon is refused where the
  gold is one value (``\\sqrt{2} \\text{ or } \\sqrt{3}`` for ``\\sqrt{2}``);
- **the gold's equation**: where the gold is an equation of variables (``y = 2x + 3``, ``5x - 7y + 11z + 4 = 0``),
  the answer is an equation with the same left side and right side (``2x + 3``, ``y - 2x = 3`` and
  ``-5x + 7y - 11z - 4 = 0`` are refused); a gold that states a value (``x = 5``) takes the value alone;
- **no larger than the gold**: the answer's expression tree (numbers kept as written, nothing evaluated, neutral
  terms counted) has at most :data:`SIZE_MARGIN` more nodes than the gold's, or :data:`SIZE_RATIO` times as many,
  whichever is more; so an expression that still has work in it, a padded copy of the question
  (``(x+2)(x+3) + x - x``) or an unevaluated product (``(1+2i)(1-i)``) is refused whatever its spelling;
- **simplest form where asked**: where the question asks for a simplified or simplest form ("simplify",
  "simplest radical form", "lowest terms", "common fraction", "expand", "factor", "rationalize"), an answer that
  sympy's automatic evaluation still changes (``\\sqrt{12}``, ``x + x``, ``\\sqrt{2}\\sqrt{6}``,
  ``\\frac{1}{\\sqrt{3}}``, ``2 \\cdot 3x``) is refused when the gold is one it leaves alone; a numeric fraction
  not in lowest terms (``\\frac{6}{8}x``) is refused where the gold has none.

- **the form the question asks for**: where it asks to factor, an answer equal to a factored gold is a product (or
  a power) at its top level (``x(x+5)+6`` for "Factor $x^2+5x+6$" is a sum); where it asks to expand, an answer
  equal to an expanded gold is a sum (``(x+1)(x+1)`` for "Expand $(x+1)^2$" is a product). Size alone lets both
  through: neither is larger than the gold.

Each refusal is a one-line reason; None means the answer is in final form. Answers much longer than the gold are
refused from their length before anything is parsed, so the check costs no more than the gold's size allows.
"""

from __future__ import annotations

import functools
import math
import re

from pacs_rl.rewards.answers import NUMBER_TOKEN, spelled_out, top_level_split, unwrap

SIZE_MARGIN = 2  # nodes an answer may have beyond the gold's (a sign, a factor written apart)
_SIMPLEST = re.compile(
    r"simplif|simplest|lowest\s+terms|common\s+fraction|radical\s+form|rationali[sz]|expand|factor|reduced",
    re.IGNORECASE,
)
_FACTOR = re.compile(r"\b(?:factor|factori[sz]e)\b(?!\s+of\b)", re.IGNORECASE)  # not "a factor of 12"
_EXPAND = re.compile(r"\bexpand\b", re.IGNORECASE)
_SEPARATORS = re.compile(r"\\text\{\s*(?:or|and)\s*\}|(?<![A-Za-z\\])(?:or|and)(?![A-Za-z])|;")
_UNREDUCED = re.compile(r"\\[dt]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}")
_TOKENS = re.compile(r"\\[A-Za-z]+|\d+(?:\.\d+)?|[A-Za-z]|[-+*/^=(){}\[\]|,]")


_SET = re.compile(r"\\left\\\{|\\right\\\}|\\[{}]")
_NAME = re.compile(r"\s*[A-Za-z](?:_\{?\w+\}?)?\s*")


def _states_a_value(left: str, right: str) -> bool:
    """``x = 5``: a name on the left, no name on the right (the answer may give the value alone)."""
    return (
        _NAME.fullmatch(left) is not None
        and re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", right)) is None
    )


def values(text: str) -> list[str]:
    """The values an answer lists at its top level: ``a, b``, ``a \\text{ or } b``, ``a; b``."""
    pieces = []
    text = re.sub(r"\\[,;:! ]|\{,\}", " ", text)  # LaTeX spaces and thousands separators are no commas
    for part in top_level_split(text, ","):
        pieces += [p.strip() for p in _SEPARATORS.split(part)]
    return [p for p in pieces if p]


def _tree_size(text: str) -> int | None:
    """Nodes of the expression tree of ``text`` as written (numbers as atoms, nothing evaluated), or None when it
    does not parse."""
    from latex2sympy2_extended import latex2sympy  # math-verify's own LaTeX parser

    placeholders = NUMBER_TOKEN.sub(
        lambda m: f"{{q_{{{m.group(1).replace('.', 'p')}}}}}", spelled_out(unwrap(text))
    )
    try:
        expr = latex2sympy(placeholders)
    except Exception:
        return None
    return _count(expr)


def _count(expr) -> int:
    """Nodes of a tree, sums and products flattened (``a + (b + c)`` counts as ``a + b + c``)."""
    args = getattr(expr, "args", ())
    if not args:
        return 1
    flat = [
        n
        for a in args
        for n in (a.args if a.func == expr.func and a.func.__name__ in ("Add", "Mul") else (a,))
    ]
    return 1 + sum(_count(a) for a in flat)


@functools.lru_cache(maxsize=4096)
def size(text: str) -> int | None:
    """The expression-tree size of an answer (:func:`_tree_size`), cached."""
    return _tree_size(text)


def _evaluation_changes(text: str) -> bool | None:
    """Whether sympy's automatic evaluation rewrites ``text`` (``\\sqrt{12}`` -> ``2\\sqrt{3}``, ``x + x`` ->
    ``2x``), or None when it does not parse. ``i`` is read as the imaginary unit."""
    import sympy
    from latex2sympy2_extended import latex2sympy

    try:
        expr = latex2sympy(spelled_out(unwrap(text))).subs(sympy.Symbol("i"), sympy.I)
        evaluated = _rebuild(expr)
    except Exception:
        return None
    return sympy.srepr(_canonical(expr)) != sympy.srepr(_canonical(evaluated))


def _rebuild(expr):
    """``expr`` built again node by node with sympy's evaluation on, except that a number is not distributed
    over a sum (``\\frac{x + 1}{2}`` is a final form, not ``\\frac{x}{2} + \\frac{1}{2}``)."""
    import sympy

    if not getattr(expr, "args", ()):
        return expr
    args = [_rebuild(a) for a in expr.args]
    if isinstance(expr, sympy.Mul) and any(isinstance(a, sympy.Add) for a in args):
        rest = sympy.Mul(*[a for a in args if not isinstance(a, sympy.Add)])
        return sympy.Mul(rest, *[a for a in args if isinstance(a, sympy.Add)], evaluate=False)
    return expr.func(*args)


def _canonical(expr):
    """One spelling per written form: products and sums flattened and in sympy's order, ``\\cdot 1`` dropped, a
    sign and one integer over one integer read as one rational (``-\\frac{3}{4}``), a number's reciprocal as a
    rational. Two numbers multiplied (``2 \\cdot 3``) stay two: that is work not done."""
    import sympy

    if not getattr(expr, "args", ()):
        return expr
    args = [_canonical(a) for a in expr.args]
    if isinstance(expr, sympy.Pow) and args[0].is_Rational and args[1] == -1:
        return sympy.Rational(1, 1) / args[0]
    if isinstance(expr, (sympy.Mul, sympy.Add)):
        flat = []
        for a in args:
            flat += list(a.args) if a.func == expr.func else [a]
        if expr.func == sympy.Mul:
            flat = _fold_numbers(flat)
        if len(flat) == 1:
            return flat[0]
        return expr.func(*sorted(flat, key=sympy.default_sort_key), evaluate=False)
    return expr.func(*args, evaluate=False) if isinstance(expr, sympy.Pow) else expr.func(*args)


def _fold_numbers(factors: list) -> list:
    """The numeric factors of a product read as one number when they are a sign and a written fraction
    (``-1``, ``3``, ``1/4``), else left as they are; factors of 1 dropped."""
    import sympy

    numbers = [f for f in factors if f.is_Rational]
    others = [f for f in factors if not f.is_Rational]
    integers = [n for n in numbers if n.is_Integer and abs(n) != 1]
    reciprocals = [n for n in numbers if not n.is_Integer and abs(n.p) == 1]
    fraction = (
        len(integers) <= 1
        and len(reciprocals) <= 1
        and len(numbers) == len(integers) + len(reciprocals) + sum(1 for n in numbers if abs(n) == 1)
    )
    if fraction and (
        not integers or not reciprocals or math.gcd(int(integers[0]), int(reciprocals[0].q)) == 1
    ):
        value = sympy.Mul(*numbers) if numbers else sympy.Integer(1)
        return ([value] if value != 1 else []) + others or [sympy.Integer(1)]
    return [n for n in numbers if n != 1] + others


def _has_unreduced_fraction(text: str) -> bool:
    return any(math.gcd(int(a), int(b)) > 1 for a, b in _UNREDUCED.findall(text))


def _token_count(text: str) -> int:
    return len(_TOKENS.findall(text))


def form_problem(answer: str, gold: str, question: str | None, equal) -> str | None:
    """Why ``answer`` (already found equal to ``gold``) is not in final form, or None when it is. ``equal(a, b)``
    compares two expressions as math-verify does (for the sides of an equation)."""
    answer, gold = unwrap(answer), unwrap(gold)
    if len(values(answer)) > len(values(_SET.sub("", gold))):
        return "several values where the gold has fewer"
    gold_sides, answer_sides = top_level_split(gold, "="), top_level_split(answer, "=")
    pairs = [(answer, gold)]
    if len(gold_sides) == 2 and not _states_a_value(*gold_sides):
        if len(answer_sides) != 2 or not (
            equal(answer_sides[0], gold_sides[0]) and equal(answer_sides[1], gold_sides[1])
        ):
            return "not the gold's equation (its left side and right side)"
        pairs = list(zip(answer_sides, gold_sides, strict=True))  # each side no larger than the gold's
    elif len(answer_sides) > 1:
        answer = answer_sides[-1]  # an equation is compared by its last side, as math-verify does
        pairs = [(answer, gold_sides[-1])]
    for a, g in pairs:
        problem = _larger(a, g)
        if problem is not None:
            return problem
    problem = _asked_form_problem(answer, gold, question)
    if problem is not None:
        return problem
    if question and _SIMPLEST.search(question):
        if _has_unreduced_fraction(answer) and not _has_unreduced_fraction(gold):
            return "a fraction not in lowest terms where a simplest form is asked"
        if _evaluation_changes(answer) and _evaluation_changes(gold) is False:
            return "not in simplest form where the question asks for it"
    return None


def _top_operation(text: str) -> str | None:
    """ "sum", "product" (a product or a power) or "other": the operation at the top of ``text`` as written (sympy
    keeps a written sum a sum and a written product a product); None when it does not parse."""
    import sympy
    from latex2sympy2_extended import latex2sympy

    try:
        expr = latex2sympy(spelled_out(unwrap(text)))
    except Exception:
        return None
    if isinstance(expr, sympy.Add):
        return "sum"
    return "product" if isinstance(expr, (sympy.Mul, sympy.Pow)) else "other"


def _asked_form_problem(answer: str, gold: str, question: str | None) -> str | None:
    """Why ``answer`` is not in the form a factor or expand question asks for (the gold's), or None."""
    if not question:
        return None
    for asked, form, verb in ((_FACTOR, "product", "factored"), (_EXPAND, "sum", "expanded")):
        if asked.search(question) and _top_operation(gold) == form and _top_operation(answer) != form:
            return f"not {verb} as the question asks"
    return None


def _larger(answer: str, gold: str) -> str | None:
    """Why ``answer`` is larger than ``gold`` allows: its tree, or, where either does not parse, its tokens."""
    answer_size, gold_size = size(answer), size(gold)
    unit = "nodes"
    if answer_size is None or gold_size is None:
        answer_size, gold_size, unit = _token_count(answer), _token_count(gold), "tokens"
    if answer_size > size_limit(gold_size):
        return f"larger than the gold ({answer_size} {unit} for {gold_size}: not evaluated or padded)"
    return None


def too_large(answer: str, gold: str) -> bool:
    """An answer with more than twice the tokens the size rule allows the gold (a cheap bound checked before
    anything parses it: a long list, a padded copy of the question)."""
    return _token_count(answer) > 2 * size_limit(_token_count(gold)) + 8


def size_limit(gold_size: int) -> int:
    """The most nodes an answer may have for a gold of ``gold_size`` nodes."""
    return gold_size + SIZE_MARGIN
