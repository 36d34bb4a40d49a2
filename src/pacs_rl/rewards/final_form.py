"""Final form: an answer to a MATH-style question (a gold that is not a plain number) is paid only when it is
exactly the gold's value *and* no less worked out than the gold, the way an examiner marks it.

math-verify decides equality by evaluating both sides at 6 decimals, so it pays any expression that comes to the
gold: a decimal approximation of an exact value, the question's own expression padded with terms that cancel, an
unevaluated root of a sum, a product left unexpanded. The rules here refuse those by construction, not by spelling
and not by size. The answer and the gold are read as written (:func:`written`: LaTeX parsed with every number kept
as the literal it is, nothing evaluated), value by value (a tuple, a set, an interval, a matrix, ``a \\pm b``):

- **exactly the gold** (:func:`inexact`): the answer's value minus the gold's, with the decimals as written read as
  exact fractions and every name given a fixed value, is zero to 30 digits: ``1.41421`` and ``\\frac{355}{113}``
  are not ``\\sqrt{2}`` and ``\\pi``, ``0.25\\pi`` is ``\\frac{\\pi}{4}``. Where the gold itself writes a decimal,
  the answer is compared at the gold's own precision (half a unit of each of its last digits);
- **no work the gold has done** (:data:`WORK`): every operation of the answer is classified by what is left to do
  in it, and the answer may have no more of any class than the gold has: numbers still to add, multiply, divide
  out or raise (``2 + 3``, ``2 \\cdot 3x``, ``\\frac{6}{8}``, ``2^{10}``, ``x^1``, a factor 1), a term or factor
  that is zero, like terms or like factors (``x + x``, ``\\sqrt{3} + 2\\sqrt{3}``, ``i \\cdot i``, ``i^2``), a root
  that comes to a number or loses its root (``\\sqrt{16}``, ``\\sqrt{\\pi^2}``, ``(\\sqrt{3})^2``, ``\\sqrt{-4}``),
  roots of numbers multiplied (``\\sqrt{2}\\sqrt{6}``), a root of a sum of constants (``\\sqrt{9 + 3}``), a sum of
  constants multiplied or raised (``2(9 + \\pi)``, ``(1 + 2i)(3 - i)``, ``(1 + \\sqrt{2})^2``; a fraction over one
  number, ``\\frac{1 + \\sqrt{5}}{2}``, is a final form), ``i`` in a denominator, a function of constants that has
  a value (``\\sin\\frac{\\pi}{6}``, ``\\log_2 8``, ``5!``, ``\\binom{8}{4}``, ``|-3|``); and no function or name
  the gold does not use (``\\frac{1}{\\tan x}`` for ``\\cot x``: the question's expression re-expressed by an
  identity is not evaluated). Whatever the size: ``\\sqrt{9+3}`` is refused for ``2\\sqrt{3}`` though it is no
  larger, and ``2\\sqrt{3}`` is paid for ``\\sqrt{12}``'s gold;
- **the form the question asks for** (:func:`asked_forms`), checked on the whole expression, each against the
  gold: "simplify", "simplest (radical) form", "rationalize": no root left to reduce (``\\sqrt{12}``,
  ``\\sqrt{\\frac{1}{2}}``, ``2^{3/2}``), no root in a denominator (``\\frac{1}{\\sqrt{3}}``), no product of sums
  the gold has expanded, no common factor of a fraction's numerator and denominator; "expand": no product or power
  of a sum anywhere (``x^2 + x(x + 1)``); "factor": as many factors as the gold, none that factors further over
  the rationals (``x(x^2 + 5x + 6)``, ``2(x^2 + 5x + 6)``, ``(2x + 4)(x + 3)``); "common fraction", "lowest
  terms": no decimal. Where nothing is asked, any form of the value is final: ``\\sqrt{12}``, ``\\frac{1}{\\sqrt{2}}``
  and ``3(x + 2)`` are right answers for ``2\\sqrt{3}``, ``\\frac{\\sqrt{2}}{2}`` and ``3x + 6``;
- **one value** where the gold has one; **the gold's equation** where the gold is an equation of variables (its
  left and right sides, each compared as above).

Cost is bounded by the size of the values, not by the number of tokens: before anything evaluates the answer,
:func:`value_problem` bounds the size of every value it writes (a power tower, ``1000!``) from its literals alone
and refuses one far larger than any the gold writes. Each refusal is a one-line reason; None means final form.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from pacs_rl.rewards.answers import spelled_out, top_level_split, unwrap

# ------------------------------------------------------------------------------------------------ the question
_ASKED = {
    # "a factor of 12" asks for nothing
    "factor": re.compile(r"\b(?:factor|factori[sz]e|factored)\b(?!\s+of\b)", re.IGNORECASE),
    "expand": re.compile(r"\bexpand(?:ed)?\b|\bmultiply\s+out\b", re.IGNORECASE),
    "simplify": re.compile(r"simplif|simplest|rationali[sz]|radical\s+form|reduced", re.IGNORECASE),
    "fraction": re.compile(
        r"common\s+fraction|lowest\s+terms|simplest\s+form|reduced\s+fraction", re.IGNORECASE
    ),
}
WORK = {  # what is still to do in an answer, whatever the question: no more of each than the gold has
    "numbers": "arithmetic on numbers not done (a sum, product, quotient or power of numbers; a factor 1)",
    "zero": "a term or factor that is zero",
    "like terms": "like terms or like factors not collected",
    "root value": "a root that has a value (a root of a square, of a negative number, a power of a root)",
    "roots multiplied": "roots of numbers multiplied, not combined",
    "root of a sum": "a root of a sum of constants",
    "sum multiplied": "a sum of constants multiplied or raised to a power, not multiplied out",
    "complex denominator": "i in a denominator",
    "function value": "a function of constants that has a value",
}
FORMS = {  # checked where the question asks for one of the forms named: no more of each than the gold has
    "root not reduced": (("simplify",), "a root not in simplest form"),
    "root denominator": (("simplify",), "a root in a denominator"),
    "product of sums": (("simplify", "expand"), "a product or power of sums not multiplied out"),
    "common factor": (("simplify", "fraction"), "a fraction whose numerator and denominator share a factor"),
    "decimal": (("fraction",), "a decimal"),
}


def asked_forms(question: str | None) -> frozenset[str]:
    """The forms a question asks for: ``factor``, ``expand``, ``simplify`` (simplify, simplest (radical) form,
    rationalize, reduced), ``fraction`` (a common fraction, lowest terms, simplest form)."""
    if not question:
        return frozenset()
    return frozenset(name for name, pattern in _ASKED.items() if pattern.search(question))


# ------------------------------------------------------------------------------------------------ values
_SEPARATORS = re.compile(r"\\text\{\s*(?:or|and)\s*\}|(?<![A-Za-z\\])(?:or|and)(?![A-Za-z])|;")
_SET = re.compile(r"\\left\\\{|\\right\\\}|\\[{}]")
_NAME = re.compile(r"\s*[A-Za-z](?:_\{?\w+\}?)?\s*")
_TOKENS = re.compile(r"\\[A-Za-z]+|\d+(?:\.\d+)?|[A-Za-z]|[-+*/^=(){}\[\]|,]")
SIZE_MARGIN = 2  # tokens an answer may have beyond the gold's where the LaTeX parser reads neither


def values(text: str) -> list[str]:
    """The values an answer lists at its top level: ``a, b``, ``a \\text{ or } b``, ``a; b``."""
    pieces = []
    text = re.sub(r"\\[,;:! ]|\{,\}", " ", text)  # LaTeX spaces and thousands separators are no commas
    for part in top_level_split(text, ","):
        pieces += [p.strip() for p in _SEPARATORS.split(part)]
    return [p for p in pieces if p]


_MATRIX = re.compile(r"^\\begin\{([pbvBV]?matrix|array)\}(?:\{[^{}]*\})?(.*)\\end\{\1\}$", re.DOTALL)
_BRACKETS = (("\\{", "\\}"), ("\\langle", "\\rangle"), ("(", ")"), ("[", "]"), ("(", "]"), ("[", ")"))
_MEMBER = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*(?:\\in|=)\s*(?=\S)")


def elements(text: str) -> list[str]:
    """The values ``text`` writes, in order: the entries of a tuple, a set, an interval, a union of intervals, a
    matrix, a list; ``a \\pm b`` as ``a + b`` and ``a - b``; ``x \\in S`` as ``S``; else ``[text]``."""
    text = unwrap(text)
    text = _MEMBER.sub("", text, count=1) if "\\in" in text else text
    matrix = _MATRIX.match(text)
    if matrix:
        return [c.strip() for row in matrix.group(2).split("\\\\") for c in row.split("&") if c.strip()]
    pieces = top_level_split(text, "\\cup")
    if len(pieces) > 1:
        return [e for p in pieces for e in elements(p)]
    for opening, closing in _BRACKETS:
        inner = text[len(opening) : -len(closing)] if len(text) > 2 else ""
        enclosed = text.startswith(opening) and text.endswith(closing) and _balanced(inner)
        if enclosed and (len(top_level_split(inner, ",")) > 1 or opening == "\\{"):
            return [e for p in top_level_split(inner, ",") if p for e in elements(p)]
    pieces = [p for p in top_level_split(text, ",") if p]
    if len(pieces) > 1:
        return [e for p in pieces for e in elements(p)]
    for sign in ("\\pm", "\\mp", "±"):
        parts = top_level_split(text, sign)
        if len(parts) == 2 and parts[1]:
            first = f"{parts[0]} +" if parts[0] else ""
            return [f"{first} ({parts[1]})", f"{parts[0]} - ({parts[1]})"]
    return [text]


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += 1 if ch in "{([" else -1 if ch in "})]" else 0
        if depth < 0:
            return False
    return depth == 0


# ------------------------------------------------------------------------------------------------ the written tree
@dataclass(frozen=True)
class Literal:
    value: Fraction
    decimals: int | None  # digits after the point of a decimal; None for an integer


@dataclass(frozen=True)
class Written:
    """One value as written: a sympy tree built with nothing evaluated, each number a placeholder symbol."""

    expr: object
    literals: dict  # placeholder symbol -> Literal

    @property
    def decimal(self) -> bool:
        return any(lit.decimals is not None for lit in self.literals.values())


def _normalization():
    from latex2sympy2_extended.math_normalization import NormalizationConfig

    # math-verify's own normalization of a LaTeX answer (units, \text, \left, malformed \frac and \sqrt), so that
    # this reads what it compares; "0.5" is not rewritten to a fraction
    return NormalizationConfig(
        basic_latex=True, units=True, malformed_operators=True, nits=False, boxed="none", equations=False
    )


_COMMAND_DIGIT = re.compile(r"(\\[A-Za-z]+)(?=\d)")
# a number as written: a mixed number (an integer and a fraction of integers, which math-verify's parser adds up),
# else an integer or a decimal (not inside a name or a subscript)
_LITERAL = re.compile(
    r"(?<![A-Za-z.\\_\d])(?:(?P<whole>\d+)\s*\\frac\{(?P<num>\d+)\}\{(?P<den>[1-9]\d*)\}"
    r"|(?P<number>\d+(?:\.\d+)?|\.\d+))"
)
_MOST_NUMBERS = 400  # an answer writing more numbers than this is not read (a cost bound)


@functools.lru_cache(maxsize=1)
def _sentinels() -> tuple[int, ...]:
    """Primes above 10^9, one per number of an answer: no two share a factor."""
    import sympy

    primes = [int(sympy.nextprime(10**9))]
    while len(primes) < _MOST_NUMBERS:
        primes.append(int(sympy.nextprime(primes[-1])))
    return tuple(primes)


@functools.lru_cache(maxsize=4096)
def written(text: str) -> Written | None:
    """``text`` parsed by math-verify's LaTeX parser with nothing evaluated and every number kept as the literal
    written (``\\frac{6}{8}`` six eighths, ``2 + 3`` a sum, ``0.5`` the decimal), or None when it does not parse
    to one expression. Each number is read as a distinct large prime while parsing (the parser reduces a fraction
    of integers, and coprime primes stay as they are; names as placeholders would cost the parser tenfold), then
    replaced by a placeholder symbol that stands for its literal."""
    import sympy
    from latex2sympy2_extended import latex2sympy
    from latex2sympy2_extended.math_normalization import normalize_latex

    text = normalize_latex(spelled_out(text), _normalization())
    text = _COMMAND_DIGIT.sub(r"\1 ", text)  # \cdot5: the 5 is a number
    found = list(_LITERAL.finditer(text))
    if not text or len(found) > _MOST_NUMBERS:
        return None
    primes = _sentinels()[: len(found)]
    pieces = iter(primes)
    try:
        with sympy.evaluate(False):
            parsed = latex2sympy(
                _LITERAL.sub(lambda _m: str(next(pieces)), text),
                normalization_config=None,
                convert_degrees=False,
            )
            if not isinstance(parsed, sympy.Expr):
                return None
            symbols = {p: sympy.Dummy(f"n{k}") for k, p in enumerate(primes)}
            expr = _with_placeholders(parsed.xreplace({sympy.Symbol("i"): sympy.I}), symbols)
    except Exception:
        return None
    literals = {}
    for symbol, m in zip(symbols.values(), found, strict=True):
        if m.group("whole") is not None:  # a mixed number, 1\frac{4}{5}: one number, as math-verify reads it
            value = int(m.group("whole")) + Fraction(int(m.group("num")), int(m.group("den")))
            literals[symbol] = Literal(value, None)
        else:
            number = m.group("number")
            literals[symbol] = Literal(Fraction(number), len(number.split(".")[1]) if "." in number else None)
    return Written(expr, literals)


def _with_placeholders(expr, symbols: dict):
    """The parsed tree with each prime that stands for a number replaced by its placeholder (a fraction the parser
    made of two, ``Rational(p, q)``, as the product of one and the other's reciprocal); called with sympy's
    evaluation off."""
    import sympy

    if isinstance(expr, sympy.Rational):
        p, q = abs(int(expr.p)), int(expr.q)
        if p not in symbols and q not in symbols:
            return expr
        factors = [sympy.Integer(-1)] if expr.p < 0 else []
        factors.append(symbols.get(p, sympy.Integer(p)))
        if q != 1:
            factors.append(sympy.Pow(symbols.get(q, sympy.Integer(q)), -1))
        return sympy.Mul(*factors) if len(factors) > 1 else factors[0]
    if isinstance(expr, sympy.UnevaluatedExpr):  # the parser's percent, 1/100
        return _with_placeholders(expr.args[0], symbols)
    if not expr.args:
        return expr
    return expr.func(*[_with_placeholders(a, symbols) for a in expr.args])


def _rational(value: Fraction):
    import sympy

    return sympy.Rational(value.numerator, value.denominator)


class _Reading:
    """What is left to do in one written value (:data:`WORK`, :data:`FORMS`), the functions and names it uses,
    and its value."""

    def __init__(self, w: Written):
        self.w = w
        self.kinds: Counter = Counter()
        self.functions: set[str] = set()
        self.names: set[str] = set()
        self._values: dict = {}

    # ------------------------------------------------------------------ values
    def value(self, e):
        """The value of a subtree with sympy's evaluation on (call :func:`value_problem` first)."""
        if e in self._values:
            return self._values[e]
        if e in self.w.literals:
            v = _rational(self.w.literals[e].value)
        elif not e.args:
            v = e
        else:
            v = e.func(*[self.value(a) for a in e.args])
        self._values[e] = v
        return v

    def const(self, e) -> bool:
        return all(s in self.w.literals for s in e.free_symbols)

    def literal(self, e) -> Fraction | None:
        lit = self.w.literals.get(e)
        return None if lit is None else lit.value

    # ------------------------------------------------------------------ the walk
    def read(self):
        self._walk(self.w.expr)
        self.kinds["decimal"] += sum(1 for lit in self.w.literals.values() if lit.decimals is not None)
        return self

    def _walk(self, e):
        import sympy

        if isinstance(e, sympy.Symbol):
            if e not in self.w.literals:
                self.names.add(e.name)
            return
        if isinstance(e, (sympy.Add, sympy.Mul)):
            parts = _flat(e)
            (self._sum if isinstance(e, sympy.Add) else self._product)(parts)
            for p in parts:
                self._walk(p)
            return
        if isinstance(e, sympy.Pow):
            if e.base == sympy.E:
                self._function(e, "exp")
            else:
                self._power(e)
        elif (
            isinstance(e, (sympy.Function, sympy.Integral, sympy.Derivative, sympy.Sum, sympy.Product))
            or (getattr(e, "is_Function", False))
            or (e.args and not isinstance(e, sympy.Tuple))
        ):
            self._function(e, type(e).__name__)
        for a in e.args:
            self._walk(a)

    def number(self, e) -> Fraction | None:
        """The value of a number as written: a literal, a sign and a literal, a written fraction of literals."""
        import sympy

        if e in self.w.literals:
            return self.w.literals[e].value
        if isinstance(e, sympy.Integer) and e != 1:  # a sign, or a number the parser read itself
            return Fraction(int(e))
        if isinstance(e, sympy.Mul):
            ints, dens, signs, others = self._numeric(_flat(e))
            if others or len(ints) > 1 or len(dens) > 1 or signs > 1:
                return None
            value = Fraction(-1 if signs else 1) * (ints[0] if ints else 1)
            return value / dens[0] if dens and dens[0] else (value if not dens else None)
        return None

    def _numeric(self, factors):
        """(literal factors, denominators, signs, other factors) of a product."""
        import sympy

        ints, dens, signs, others = [], [], 0, []
        for f in factors:
            lit = self.literal(f)
            if lit is not None:
                ints.append(lit)
            elif isinstance(f, sympy.Integer) and f == -1:
                signs += 1
            elif isinstance(f, sympy.Integer) and f == 1:
                continue  # the parser's own factor 1 (``\\int x\\,dx``), not written
            elif isinstance(f, sympy.Integer):
                ints.append(Fraction(int(f)))  # a number the parser read itself
            elif isinstance(f, sympy.Pow) and f.exp == -1 and self.literal(f.base) is not None:
                dens.append(self.literal(f.base))
            else:
                others.append(f)
        return ints, dens, signs, others

    def _sum(self, terms):
        numbers = [t for t in terms if self.number(t) is not None]
        if len(numbers) > 1:
            self.kinds["numbers"] += len(numbers) - 1
        self.kinds["zero"] += sum(1 for t in numbers if self.number(t) == 0)
        keys = Counter(self._like_key(t) for t in terms if self.number(t) is None)
        self.kinds["like terms"] += sum(c - 1 for c in keys.values())
        if numbers and _ONE in keys:  # an operation on constants that comes to a number, beside a number
            self.kinds["numbers"] += 1

    def _like_key(self, term) -> str:
        import sympy

        value = self.value(term)
        rest = value.as_coeff_Mul()[1] if isinstance(value, sympy.Expr) else value
        return sympy.srepr(rest)

    def _product(self, factors):
        import sympy

        ints, dens, signs, others = self._numeric(factors)
        if any(v == 0 for v in ints):
            self.kinds["zero"] += 1
        extra = max(len(ints) - 1, 0) + max(len(dens) - 1, 0) + max(signs - 1, 0)
        if not extra and ints and dens:
            n, d = ints[0], dens[0]
            if n.denominator != 1 or d.denominator != 1 or d <= 1 or math.gcd(n.numerator, d.numerator) > 1:
                extra = 1  # \frac{6}{8}, \frac{0.5}{2}, \frac{3}{1}
        elif not extra and dens and (dens[0].denominator != 1 or dens[0] <= 1):
            extra = 1
        elif not extra and ints == [1] and not dens and others and not any(_is_reciprocal(f) for f in others):
            extra = 1  # a factor 1 (not the numerator of \frac{1}{\sqrt{2}})
        self.kinds["numbers"] += extra
        bases = Counter()
        roots: Counter = Counter()
        for f in others:
            index = self._root_index(f)
            if index is not None:
                roots[index] += 1
                continue
            base = f.base if isinstance(f, sympy.Pow) else f
            bases[sympy.srepr(self.value(base))] += 1
        self.kinds["like terms"] += sum(c - 1 for c in bases.values())
        self.kinds["roots multiplied"] += sum(c - 1 for c in roots.values())
        sums = [f for f in others if _is_sum(f)]
        rest = [f for f in others if not _is_sum(f) and not _is_reciprocal(f)]
        # a sum over one number, with a sign, is a fraction (\frac{1 + \sqrt{5}}{2}, -\frac{x + 1}{2}): no product
        over_a_number = len(sums) == 1 and isinstance(sums[0], sympy.Add) and not rest and ints in ([], [1])
        if sums and all(self.const(f) for f in factors):
            if not over_a_number:
                self.kinds["sum multiplied"] += 1
            elif dens and math.gcd(self._content(sums[0]), dens[0].numerator) > 1:
                self.kinds["numbers"] += 1  # \frac{2 + 2\sqrt{5}}{4}
        elif sums and not over_a_number:
            self.kinds["product of sums"] += 1
        self._common_factor(factors)

    def _content(self, total) -> int:
        """The greatest common divisor of the integer coefficients of a sum's terms (0 when one is no integer)."""
        g = 0
        for t in _flat(total):
            c = self.value(t).as_coeff_Mul()[0]
            if not c.is_Integer:
                return 0
            g = math.gcd(g, int(c))
        return g

    def _root_index(self, f) -> int | None:
        """n for a root of a number (``\\sqrt[n]{a}``, ``a^{p/n}``, ``\\frac{1}{\\sqrt{a}}``), else None."""
        import sympy

        if isinstance(f, sympy.Pow) and f.exp == -1:
            f = f.base
        if isinstance(f, sympy.Pow) and self.number(f.base) is not None and self.const(f.exp):
            exponent = self.value(f.exp)
            if exponent.is_Rational and not exponent.is_Integer:
                return int(exponent.q)
        return None

    def _power(self, e):
        import sympy

        base, exponent = e.base, e.exp
        if not self.const(exponent):
            return
        x = self.value(exponent)
        written_exponent = any(s in self.w.literals for s in exponent.free_symbols)
        if x == -1 and not written_exponent:  # a denominator (\frac{1}{a}), not a written power
            if self.const(base) and self.value(base).has(sympy.I):
                self.kinds["complex denominator"] += 1
            elif self.const(base) and self._has_root(base):
                self.kinds["root denominator"] += 1
            return
        if x.is_Integer:
            if written_exponent and x in (0, 1):
                self.kinds["numbers"] += 1  # x^0, x^1
            elif self.number(base) is not None or base == sympy.I:
                self.kinds["numbers"] += 1  # 2^{10}, i^2
            elif _is_sum(base) and self.const(base) and x > 1:
                self.kinds["sum multiplied"] += 1
            elif self._root_index(base) is not None:
                self.kinds["root value"] += 1  # (\sqrt{3})^2
            elif _is_sum(base) and x > 1:
                self.kinds["product of sums"] += 1
            return
        if not x.is_Rational or not self.const(base):
            return
        value = self.value(e)
        if not any(
            isinstance(p, sympy.Pow) and not p.exp.is_Integer for p in sympy.preorder_traversal(value)
        ):
            self.kinds["root value"] += 1  # \sqrt{16}, \sqrt{\pi^2}, \sqrt{-4}
        elif isinstance(base, sympy.Add):
            self.kinds["root of a sum"] += 1
        elif value != sympy.Pow(self.value(base), x, evaluate=False) or x < 0 or x > 1:
            self.kinds["root not reduced"] += 1  # \sqrt{12}, \sqrt{1/2}, 2^{3/2}

    def _has_root(self, e) -> bool:
        import sympy

        return any(
            isinstance(p, sympy.Pow) and not p.exp.is_Integer for p in sympy.preorder_traversal(self.value(e))
        )

    def _function(self, e, name: str):
        import sympy

        self.functions.add({"exp": "exp", "Pow": "exp"}.get(name, name))
        if self.const(e):
            value = self.value(e)
            if not value.has(e.func) and not (name == "exp" and value.has(sympy.exp)):
                self.kinds["function value"] += 1  # \sin\frac{\pi}{6}, 5!, \log_2 8

    def _common_factor(self, factors):
        """A fraction of polynomials whose numerator and denominator share a factor (``\\frac{x^2-1}{x-1}``)."""
        import sympy

        dens = [
            f for f in factors if isinstance(f, sympy.Pow) and f.exp.is_negative and not self.const(f.base)
        ]
        if not dens:
            return
        nums = [f for f in factors if f not in dens]
        try:
            num = sympy.Mul(*[self.value(f) for f in nums])
            den = sympy.Mul(*[self.value(f.base) ** -self.value(f.exp) for f in dens])
            gens = sorted(num.free_symbols | den.free_symbols, key=str)
            if (
                not gens
                or sympy.Poly(num, *gens).total_degree() > 32
                or sympy.Poly(den, *gens).total_degree() > 32
            ):
                return
            if sympy.gcd(num, den).free_symbols:
                self.kinds["common factor"] += 1
        except (sympy.PolynomialError, sympy.polys.polyerrors.GeneratorsNeeded, TypeError, ValueError):
            return


_ONE = "Integer(1)"  # the like-term key of a term that is a number


def _flat(e) -> list:
    """The terms of a sum or the factors of a product, nested sums and products flattened."""
    out = []
    for a in e.args:
        out += _flat(a) if a.func == e.func else [a]
    return out


def _is_sum(f) -> bool:
    import sympy

    base = f.base if isinstance(f, sympy.Pow) and f.exp.is_Integer and f.exp > 0 else f
    return isinstance(base, sympy.Add)


def _is_reciprocal(f) -> bool:
    import sympy

    return isinstance(f, sympy.Pow) and f.exp.is_negative


@functools.lru_cache(maxsize=4096)
def reading(text: str) -> _Reading | None:
    """The reading of one value (:class:`_Reading`), or None when it does not parse or its values are too large
    to evaluate."""
    w = written(text)
    if w is None or _size(w.expr, w.literals)[0] > _READ_BITS:
        return None
    try:
        return _Reading(w).read()
    except Exception:  # sympy on a form it cannot build: no reading
        return None


# ------------------------------------------------------------------------------------------------ value sizes
_VALUE_BITS = 256  # no value of more bits than this (or than twice the gold's largest) is evaluated
_READ_BITS = 1 << 16  # no value larger than this is evaluated for a reading, gold or answer
_DEGREE = 64  # no power of a name above this degree (or four times the gold's) is expanded
_INF = float("inf")
_GROWING = (
    "factorial",
    "gamma",
    "binomial",
    "factorial2",
    "RisingFactorial",
    "FallingFactorial",
    "subfactorial",
)


def _size(e, literals: dict) -> tuple[float, float]:
    """Upper bounds on the bits of the largest value (or of the smallest value's reciprocal) anywhere in ``e`` and
    on its degree in its names, from its literals alone: nothing is evaluated, so a power tower costs no more than
    its tokens."""
    import sympy

    if e in literals:
        v = literals[e].value
        return max(abs(v.numerator).bit_length(), v.denominator.bit_length(), 1), 0.0
    if isinstance(e, sympy.Number):
        return (max(abs(e.p).bit_length(), e.q.bit_length(), 1) if e.is_Rational else 64), 0.0
    if not e.args:
        return 2.0, (1.0 if isinstance(e, sympy.Symbol) else 0.0)  # a name, pi, e, i: a small value
    kids = [_size(a, literals) for a in e.args]
    bits, degrees = [b for b, _d in kids], [d for _b, d in kids]
    if isinstance(e, sympy.Add):
        return max(bits) + math.log2(len(bits)) + 1, max(degrees)
    if isinstance(e, sympy.Mul):
        return sum(bits), sum(degrees)
    if isinstance(e, sympy.Pow):
        if bits[1] > 32 or degrees[1]:
            return _INF, _INF if degrees[0] else 0.0
        return max(bits[0] * 2.0 ** bits[1], *bits), degrees[0] * 2.0 ** bits[1]
    if type(e).__name__ in _GROWING or isinstance(e, sympy.exp) or type(e).__name__ in ("sinh", "cosh"):
        return (_INF if bits[0] > 32 else max(2.0 ** bits[0] * bits[0], *bits)), max(degrees)
    return max(bits), max(degrees)


def _largest(text: str) -> tuple[float, float] | None:
    sizes = [_size(w.expr, w.literals) for e in elements(text) if (w := written(e)) is not None]
    return (max(b for b, _d in sizes), max(d for _b, d in sizes)) if sizes else None


def value_problem(answer: str, gold: str) -> str | None:
    """Why ``answer`` is refused before anything evaluates or expands it: a value far larger than any the gold
    writes (a power tower, ``1000!``) or a power far higher (``(x + 1)^{1000}``), bounded from its literals alone;
    None otherwise."""
    found = _largest(unwrap(answer))
    if found is None:
        return None
    gold_bits, gold_degree = _largest(unwrap(gold)) or (0.0, 0.0)
    if found[0] > max(_VALUE_BITS, 2 * gold_bits):
        return "a value far larger than any the gold writes (not evaluated)"
    if found[1] > max(_DEGREE, 4 * gold_degree):
        return "a power far higher than any the gold writes (not expanded)"
    return None


# ------------------------------------------------------------------------------------------------ exactness
_EXACT_DIGITS = 30


def inexact(a: _Reading, g: _Reading) -> bool | None:
    """Whether the value of answer ``a`` differs from gold ``g``'s, every name given one fixed value: beyond 30
    digits, or beyond 10 digits past the longest number the answer writes (so that no number of digits makes a
    decimal exact), or, where the gold writes a decimal, beyond the gold's own precision; None when it cannot be
    told."""
    import sympy

    answer, gold = a.w, g.w
    written_digits = max(
        (len(str(abs(lit.value.numerator))) + (lit.decimals or 0) for lit in answer.literals.values()),
        default=0,
    )
    exact = max(_EXACT_DIGITS, written_digits + 10)
    try:
        av, gv = a.value(answer.expr), g.value(gold.expr)
        names = sorted((av.free_symbols | gv.free_symbols), key=str)
        point = {s: sympy.Rational(101 + 12 * k, 97) for k, s in enumerate(names)}
        digits = exact + 20
        difference = abs(sympy.N((av - gv).xreplace(point), digits))
        scale = abs(sympy.N(gv.xreplace(point), digits))
        if not (difference.is_number and scale.is_number) or not difference.is_finite or not scale.is_finite:
            return None
        tolerance = max(scale, 1) * sympy.Float(10, digits) ** -exact
        for symbol, lit in gold.literals.items():
            if lit.decimals is not None:  # the gold's own precision: half a unit of its last digit
                half = sympy.Rational(1, 2 * 10**lit.decimals)
                moved = g.value(gold.expr.xreplace({symbol: _rational(lit.value) + half}))
                tolerance += abs(sympy.N((moved - gv).xreplace(point), digits))
        return bool(difference > tolerance)
    except Exception:  # a value sympy cannot compute numerically: math-verify's equality stands
        return None


# ------------------------------------------------------------------------------------------------ the rules
def _states_a_value(left: str, right: str) -> bool:
    """``x = 5``: a name on the left, no name on the right (the answer may give the value alone)."""
    return (
        _NAME.fullmatch(left) is not None
        and re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", right)) is None
    )


def form_problem(answer: str, gold: str, question: str | None, equal) -> str | None:
    """Why ``answer`` (already found equal to ``gold`` by math-verify) is not in final form, or None when it is.
    ``equal(a, b)`` compares two expressions as math-verify does (for the sides of an equation)."""
    answer, gold = unwrap(answer), unwrap(gold)
    gold_values = max(len(values(_SET.sub("", gold))), len(elements(gold)))  # 1 \pm \sqrt{19}: two
    if len(values(answer)) > gold_values:
        return "several values where the gold has fewer"
    gold_sides, answer_sides = top_level_split(gold, "="), top_level_split(answer, "=")
    pairs = [(answer, gold)]
    if len(gold_sides) == 2 and not _states_a_value(*gold_sides):
        if len(answer_sides) != 2 or not (
            equal(answer_sides[0], gold_sides[0]) and equal(answer_sides[1], gold_sides[1])
        ):
            return "not the gold's equation (its left side and right side)"
        pairs = list(zip(answer_sides, gold_sides, strict=True))  # side by side
    elif len(answer_sides) > 1:
        # an equation is compared by its last side, as math-verify does
        pairs = [(answer_sides[-1], gold_sides[-1])]
    asked = asked_forms(question)
    for a, g in pairs:
        problem = _value_form_problem(a, g, asked)
        if problem is not None:
            return problem
    return None


def _value_form_problem(answer: str, gold: str, asked: frozenset[str]) -> str | None:
    answer_elements, gold_elements = elements(answer), elements(gold)
    answers = [reading(e) for e in answer_elements]
    golds = [reading(e) for e in gold_elements]
    if None in answers or None in golds:
        return _larger_in_tokens(answer, gold)  # the structure cannot be read: its size is all there is
    if len(answers) == len(golds):
        problem = _inexact_problem(answers, golds)
        if problem is not None:
            return problem
    a_kinds = sum((r.kinds for r in answers), Counter())
    g_kinds = sum((r.kinds for r in golds), Counter())
    for kind, what in WORK.items():
        if a_kinds[kind] > g_kinds[kind]:
            return f"not evaluated: {what}"
    functions = set().union(*(r.functions for r in answers)) - set().union(*(r.functions for r in golds))
    if functions:
        return f"a function the gold does not use ({', '.join(sorted(functions))}): not evaluated"
    names = set().union(*(r.names for r in answers)) - set().union(*(r.names for r in golds))
    if names:
        return f"a name the gold does not have ({', '.join(sorted(names))})"
    for kind, (forms, what) in FORMS.items():
        if asked.intersection(forms) and a_kinds[kind] > g_kinds[kind]:
            return f"{what}, where the question asks for {' or '.join(sorted(asked.intersection(forms)))}"
    if "factor" in asked and len(answers) == len(golds) == 1:
        return _factor_problem(answers[0], golds[0])
    return None


def _inexact_problem(answers: list[_Reading], golds: list[_Reading]) -> str | None:
    """The values compared one to one, in order, else each answer value with some gold value (a set)."""
    verdicts = [inexact(a, g) for a, g in zip(answers, golds, strict=True)]
    if not any(verdicts):
        return None
    if all(any(inexact(a, g) is False for g in golds) for a in answers):
        return None  # the same values in another order
    if any(a.w.decimal for a in answers):
        return "a decimal approximation, not exactly the gold"
    return "not exactly the gold (equal only to 6 decimals)"


def _factors(r: _Reading) -> list[tuple[object, int]]:
    """The factors of a product that hold a name, with their powers (numbers and signs left out)."""
    import sympy

    expr = r.w.expr
    out = []
    for f in _flat(expr) if isinstance(expr, sympy.Mul) else [expr]:
        power = 1
        if isinstance(f, sympy.Pow) and r.const(f.exp) and r.value(f.exp).is_Integer and r.value(f.exp) > 0:
            f, power = f.base, int(r.value(f.exp))
        if not r.const(f):
            out.append((f, power))
    return out


def _factor_problem(answer: _Reading, gold: _Reading) -> str | None:
    """Where a factorization is asked of a gold that is one: at least as many factors as the gold, and none that
    factors further over the rationals or keeps a common number (``2x + 4``)."""

    gold_factors = _factors(gold)
    if sum(p for _f, p in gold_factors) < 2:
        return None  # the gold is no product: nothing to compare
    answer_factors = _factors(answer)
    if sum(p for _f, p in answer_factors) < sum(p for _f, p in gold_factors):
        return "not factored as far as the gold, where the question asks to factor"
    if _factors_further(answer, answer_factors) > _factors_further(gold, gold_factors):
        return "a factor that factors further, where the question asks to factor"
    return None


def _factors_further(r: _Reading, factors: list[tuple[object, int]]) -> int:
    """How many of the factors factor further over the rationals or keep a common number (``2x + 4``); a factor
    of degree above 64 counts as one (it is not factored to check)."""
    import sympy

    further = 0
    for f, _p in factors:
        try:
            value = r.value(f)
            gens = sorted(value.free_symbols, key=str)
            poly = sympy.Poly(value, *gens)
            if poly.total_degree() > 64:
                further += 1
                continue
            _content, parts = sympy.factor_list(value, *gens)
            if sum(m for _g, m in parts) > 1 or (poly.domain.is_ZZ and abs(poly.content()) > 1):
                further += 1
        except (sympy.PolynomialError, sympy.polys.polyerrors.GeneratorsNeeded, TypeError, ValueError):
            continue  # no polynomial (a root, a function): nothing to factor over the rationals
    return further


def _larger_in_tokens(answer: str, gold: str) -> str | None:
    """Where the LaTeX parser reads neither structure: no more tokens than the gold's and :data:`SIZE_MARGIN`."""
    answer_size, gold_size = len(_TOKENS.findall(answer)), len(_TOKENS.findall(gold))
    if answer_size > gold_size + SIZE_MARGIN:
        return f"larger than the gold ({answer_size} tokens for {gold_size}; its structure cannot be read)"
    return None


def too_large(answer: str, gold: str) -> bool:
    """An answer with more than twice the gold's tokens and a dozen more (a cheap bound checked before anything
    parses it: a long list, a padded copy of the question)."""
    return len(_TOKENS.findall(answer)) > 2 * len(_TOKENS.findall(gold)) + 12
