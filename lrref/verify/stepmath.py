"""What a reasoning step states in numbers: the quantities it names, what it computes from them, and what each
number is bound to, extracted and normalised (no model).

The ``math`` verifier (:class:`lrref.verify.verifiers.MathVerifier`) accepts a draft step only when its numeric claims
agree with the target's step at the same position (:func:`agree`), then checks the prose with the embedding
cosine.  Extraction (:func:`claims`):

1. *Normalise the text* (:func:`normalise`): markdown emphasis and step labels at a line's start (``Step 2:``,
   ``2.``, ``### Step 2``) are dropped; LaTeX ``\\frac{a}{b}`` becomes ``(a / b)`` (a number over a number: the
   fraction ``a/b``; a whole number before it, ``2\\frac{1}{2}``, a mixed number), ``\\times``/``\\cdot`` ``*``,
   ``\\div`` ``/``, ``\\approx`` ``=``, ``\\text{...}`` its words, other commands and braces nothing; ``×``, ``·``,
   ``x`` between numbers and the words ``times``/``multiplied by`` are ``*``, ``÷`` and ``divided by`` ``/``,
   ``plus`` ``+``, ``minus`` and the minus signs ``−``/``–`` ``-``, ``equals``/``is equal to`` ``=``; a unit ratio
   (``pages/day``) is a word, not a division; a hyphen between a number and a word (``2-hour``) is a space; a
   currency sign before a number (``$12``) is the unit ``dollar``.
2. *Numbers*: thousands separators and the currency signs are dropped, decimals are exact fractions (``1.50`` =
   ``1.5``); ``a/b`` written without spaces, ``\\frac{a}{b}`` and mixed numbers (``2 1/2``) are one number
   (``1/2`` = ``\\frac{1}{2}`` = ``0.5``); ``p%``/``p percent`` is ``p/100`` (``25% of 80`` reads ``0.25 * 80``);
   the words two..ninety-nine, ``dozen`` (12), ``half`` (1/2) and ``twice`` (2) are numbers, and ``one`` where it
   counts something (not ``one of``, ``no one``, ``this one``).
3. *Expressions* (:func:`parse_side`): numbers, single-letter variables (``2x + 3``: ``x``), operators
   (``+ - * / ^``), parentheses and ``=`` that follow each other form a chain; punctuation (``, ; : . ! ?`` and line
   breaks) and two values in a row without an operator end it.  A chain's sides are split at ``=`` and each is
   parsed with the usual precedence (``^`` over ``*`` ``/`` over ``+`` ``-``, left to right, a leading ``-`` a
   sign) into an exact value: a number, or a polynomial in the variables.  A side with an operator is an
   *expression*.

A step's claims (:class:`Claims`):

- *leaves*: every number it writes and every variable;
- *results*: the value of every side of every chain that has an expression (``120 - 45 - 38 = 37``: 37 computed,
  37 stated; ``4 - 10 = 6``: -6 computed, 6 stated, a false equation);
- *computed*: the results, the value of every sub-expression, and every partial sum or product of an
  expression's terms or factors (``120 - 45 - 38``: 75, 82, 37 and -83), so a computation written in one chain or
  split into several, with its operands in any order, computes the same values;
- *derivable*: leaves, computed values, and the written forms of the normalised numbers (``25%``: 25 and 100;
  ``3/4``: 3 and 4);
- *units*: each number that is not an operand of an expression, with the noun after it (``12 dollars per hour``:
  ``dollar``; a plural is its singular; none when a small word follows, e.g. ``and``);
- *bindings*: each number with the word right before it when that word says what it is (``keeps 3``: ``keep``).

:func:`agree` (checked in this order, the first failure is the reason):

1. ``equations``: every result of each step is computed by the other (``10 - 4 = 6`` vs ``4 - 10 = 6``,
   ``60 / 15 = 4`` vs ``15 / 60 = 4``, ``2 + 3 x 4 = 14`` vs ``2 x 3 + 4 = 14``, ``2x + 3 = 11`` vs ``2 + 3x = 11``
   differ; ``25% of 80 = 20`` vs ``80 x 25 / 100 = 20`` and a chained vs a split subtraction agree);
2. ``numbers``: every leaf of each step is derivable in the other (a draft that drops ``half`` or a price the
   target's step names, or adds one, is another step);
3. ``units``: a number both steps state outside an expression has the same unit in both, or none in both
   (``12 dollars per hour`` vs ``12``; ``3 apples`` vs ``3 pears``), and a word that binds numbers in both steps binds
   at least one number in common (``keeps 3`` vs ``keeps 6``).

Two steps with no number and no variable on either side have no numeric claim: :func:`agree` says ``prose`` and the
verifier decides them with its stricter prose cosine.  The rule needs no context, so it is the same in every mode.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from functools import reduce
from itertools import accumulate, combinations

from ..answers import strip_thousands

# --- values: exact numbers or polynomials in single-letter variables --------------------------------------------

Mono = tuple[str, ...]  # a monomial: its variables, sorted (x^2 -> ('x', 'x')); () is the constant
Poly = dict[Mono, Fraction]
Value = Fraction | frozenset  # canonical: a Fraction, or a polynomial's frozenset of (monomial, coefficient)

MAX_TERMS = 6  # partial sums / products of every subset up to this many terms (2^6 = 64); beyond, runs only
MAX_POWER = 12  # a larger integer exponent (or a non-integer one) leaves the side without a value


def key(p: Poly) -> Value:
    """The canonical, hashable form of a polynomial (a Fraction when it is a constant)."""
    items = {m: c for m, c in p.items() if c}
    if not items:
        return Fraction(0)
    if set(items) == {()}:
        return items[()]
    return frozenset(items.items())


def const(v: Fraction) -> Poly:
    return {(): Fraction(v)}


def _add(a: Poly, b: Poly, sign: int = 1) -> Poly:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, Fraction(0)) + sign * c
    return {m: c for m, c in out.items() if c}


def _mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb))
            out[m] = out.get(m, Fraction(0)) + ca * cb
    return {m: c for m, c in out.items() if c}


def _constant(p: Poly) -> Fraction | None:
    return p.get((), Fraction(0)) if set(p) <= {()} else None


def _div(a: Poly, b: Poly) -> Poly | None:
    """``a / b``: only by a nonzero constant (None otherwise)."""
    c = _constant(b)
    if not c:
        return None
    return {m: v / c for m, v in a.items()}


def _pow(a: Poly, b: Poly) -> Poly | None:
    """``a ^ b`` for an integer constant ``b`` (negative only for a constant ``a``); None otherwise."""
    e = _constant(b)
    if e is None or e.denominator != 1 or abs(e) > MAX_POWER:
        return None
    e = int(e)
    base = _constant(a)
    if base is not None:
        if base == 0 and e < 0:
            return None
        return const(base ** e)
    if e < 0:
        return None
    out = const(Fraction(1))
    for _ in range(e):
        out = _mul(out, a)
    return out


def show(v: Value) -> str:
    """A value as a step would write it: ``6``, ``-1/4``, ``2*x + 3``."""
    if isinstance(v, Fraction):
        return str(v)
    terms = []
    for m, c in sorted(v, key=lambda mc: (-len(mc[0]), mc[0])):
        var = "*".join(m)
        if not var:
            terms.append(show(c))
        else:
            terms.append(var if c == 1 else f"-{var}" if c == -1 else f"{show(c)}*{var}")
    return " + ".join(terms).replace("+ -", "- ")


# --- 1. normalising the text ------------------------------------------------------------------------------------

_UNITS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}
_TEENS = {"ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
          "seventeen": 17, "eighteen": 18, "nineteen": 19}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
         "ninety": 90}
_WORDS = _UNITS | _TEENS | _TENS | {"dozen": 12, "twice": 2}
_NUMBER_WORD = re.compile(r"\b(?:({})[- ]({}|one)|({}))\b".format("|".join(_TENS), "|".join(_UNITS),
                                                                   "|".join(_WORDS)), re.IGNORECASE)
# "one" counts something unless it is a pronoun: "one of", "one another", "no one", "this one", "the one"...
_ONE = re.compile(r"(?<!\bno )(?<!\bany )(?<!\bthis )(?<!\bthat )(?<!\bthe )(?<!\beach )(?<!\bevery )"
                  r"(?<!\bsome )(?<!\bwhich )\bone\b(?! of\b)(?! another\b)(?![-']\w)", re.IGNORECASE)
_REPLACE = (  # (pattern, replacement), in order: markdown and labels, LaTeX, symbols, words
    (r"\*\*|__|`", " "),
    (r"(?im)^[ \t>#]*(?:step\s*\d+\s*[:.)-]?|\d+[.)](?=\s))", " "), (r"(?m)^[ \t]*[-*+>]\s+", " "),
    # a mixed number (2\frac{1}{2}) and a fraction of two numbers are one number: a/b, tight
    (r"(\d)\s*\\[dt]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}", r"\1 \2/\3"),
    (r"\\[dt]?frac\s*\{\s*(-?\d+(?:\.\d+)?)\s*\}\s*\{\s*(\d+(?:\.\d+)?)\s*\}", r" \1/\2 "),
    (r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r" ( \1 ) / ( \2 ) "),
    (r"\\(?:text|mathrm|textbf|mbox|operatorname)\s*\{([^{}]*)\}", r" \1 "),
    (r"\\(?:times|cdot|ast)(?![A-Za-z])", " * "), (r"\\div(?![A-Za-z])", " / "),
    (r"\\approx(?![A-Za-z])", " = "), (r"\\%", "%"), (r"\\\$", "$"), (r"\\[,;!: ]", ""),
    (r"\\[A-Za-z]+|\\.|[{}]", " "),
)
_REPLACE_AFTER = (  # after thousands separators are gone
    (r"[$€£¥]\s*(\d+(?:\.\d+)?)", r" \1 dollars "), (r"[$€£¥]", " "), (r"(?<=[A-Za-z])['’][A-Za-z]+", ""),
    ("[×✕⋅·∙]", " * "), ("[÷∕]", " / "), ("[−–]", " - "), ("[≈]", " = "), ("\u00a0", " "),
    (r"(?<=[\d)])\s*[xX]\s*(?=[\d(])", " * "), (r"(?<=\d)-(?=[A-Za-z])", " "),
    (r"(?<=[A-Za-z])\s*/\s*(?=[A-Za-z])", " per "),  # pages/day: a rate, not a division
    (r"(?<=\d)\s+(\d+)/(\d+)\b", r"+\1/\2"),  # "2 1/2": a mixed number, marked for the tokenizer
    (r"(?i)\b(?:multiplied\s+by|times)\b", " * "), (r"(?i)\bdivided\s+by\b", " / "), (r"(?i)\bplus\b", " + "),
    (r"(?i)\bminus\b", " - "), (r"(?i)\b(?:equals|is\s+equal\s+to)\b", " = "),
    (r"(?i)\s*\bper\s*cent\b|\s*\bpercent\b", "%"), (r"(?i)%\s*of\b", "% * "),
    (r"(?i)(\d/\d+)\s+of\b", r"\1 * "), (r"(?i)\bhalf\s+of\b", " 1/2 * "), (r"(?i)\bhalf\b", " 1/2 "),
)
_REPLACE_RE = tuple((re.compile(p), r) for p, r in _REPLACE)
_REPLACE_AFTER_RE = tuple((re.compile(p), r) for p, r in _REPLACE_AFTER)


def _word_number(m: re.Match) -> str:
    if m.group(1):
        units = _UNITS | {"one": 1}
        return f" {_TENS[m.group(1).lower()] + units[m.group(2).lower()]} "
    return f" {_WORDS[m.group(3).lower()]} "


def normalise(text: str) -> str:
    """The text with its numbers, operators and ``=`` in plain ASCII (module doc, steps 1 and 2)."""
    s = strip_thousands(text)  # 1{,}234 before LaTeX braces go
    for rx, rep in _REPLACE_RE:
        s = rx.sub(rep, s)
    s = strip_thousands(s)
    for rx, rep in _REPLACE_AFTER_RE:
        s = rx.sub(rep, s)
    s = _NUMBER_WORD.sub(_word_number, s)
    return _ONE.sub(" 1 ", s)


# --- 2. tokens --------------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"(?P<num>(?:\d+(?:\.\d+)?|\.\d+)(?:\+\d+/\d+|/\d+(?:\.\d+)?(?!\.?\d))?(?:\s*%)?)"
                    r"|(?P<op>[-+*/^])|(?P<eq>=)|(?P<lp>\()|(?P<rp>\))"
                    r"|(?P<word>[A-Za-z_]+)|(?P<sep>[,;:!?\n]|\.(?!\d))")


@dataclass(frozen=True)
class Number:
    """A number as written: its value, how it was written and the numbers it was written with (``25%``: 1/4, a
    percent written with 25 and 100)."""

    value: Fraction
    form: str = "plain"  #: plain, fraction (a/b), mixed (w a/b) or percent
    written: tuple[Fraction, ...] = ()


def _number(s: str) -> Number:
    """A ``num`` token's value: a decimal, ``a/b``, a mixed ``w+a/b`` (from :func:`normalise`) or a percent."""
    pct = s.endswith("%")
    s = s.rstrip("%").strip()
    form, written = "plain", ()
    if "+" in s:
        whole, frac = s.split("+")
        a, b = frac.split("/")
        v = Fraction(whole) + (Fraction(a) / Fraction(b) if Fraction(b) else 0)
        form, written = "mixed", (Fraction(whole), Fraction(a), Fraction(b))
    elif "/" in s:
        a, b = s.split("/")
        v = Fraction(a) / Fraction(b) if Fraction(b) else Fraction(a)
        form, written = "fraction", (Fraction(a), Fraction(b))
    else:
        v = Fraction(s)
    if pct:
        return Number(v / 100, "percent", written + (v, Fraction(100)))
    return Number(v, form, written)


_SMALL = frozenset(  # words that say nothing about what a number is (no unit, no binding)
    "a an and or so the is are was were be been being to of in on at by for from with then than that this these "
    "those it its he she they we you i his her their our your there here which who whom what when where how as if "
    "but into over under after before about only just all each every per more less fewer total left remaining "
    "altogether together also still now will would can could should must may might has have had do does did get "
    "gets got make makes made give gives gave take takes took need needs needed equal equals answer result final "
    "step first second third next last not no yes both either other another x".split())
_RATE = frozenset("per a an each every".split())  # "18 pages per day", "18 pages a day": page/day


@dataclass(frozen=True)
class Token:
    kind: str  #: num, var, op, eq, lp, rp, word, sep
    text: str
    number: Number | None = None


def _neighbour(raw: list[tuple[str, str]], i: int, step: int) -> str | None:
    """The kind of the nearest token that is not a word, before (step -1) or after (step 1) ``raw[i]``."""
    j = i + step
    while 0 <= j < len(raw) and raw[j][0] == "word":
        j += step
    return raw[j][0] if 0 <= j < len(raw) else None


def tokens(text: str) -> list[Token]:
    """The normalised text's tokens.  ``x`` between two values (words aside: ``18 pages x 14 days``) is ``*``;
    another one-letter word right next to a number, an operator, ``=`` or a parenthesis is a variable (``a`` and
    ``I`` never are), and a value right before a variable multiplies it (``2x``)."""
    raw = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(normalise(text))]
    out: list[Token] = []
    for i, (kind, s) in enumerate(raw):
        if kind == "word" and len(s) == 1 and s not in "aAI":
            if s in "xX" and _neighbour(raw, i, -1) in ("num", "rp") and _neighbour(raw, i, 1) in ("num", "lp"):
                out.append(Token("op", "*"))
                continue
            near = {raw[j][0] for j in (i - 1, i + 1) if 0 <= j < len(raw)}
            if near & {"num", "op", "eq", "lp", "rp"}:
                if out and out[-1].kind in ("num", "rp", "var"):
                    out.append(Token("op", "*"))
                out.append(Token("var", s.lower()))
                continue
        out.append(Token(kind, s, _number(s) if kind == "num" else None))
    return out


# --- 3. chains, sides and their values --------------------------------------------------------------------------

_VALUE = ("num", "var")


def chains(toks: list[Token]) -> list[list[list[Token]]]:
    """Chains of sides: split at punctuation and where a value follows a value without an operator, then at
    ``=``; words inside a chain are skipped (``18 pages * 14 days`` is ``18 * 14``)."""
    out, cur, side = [], [], []
    prev = None
    for t in toks + [Token("sep", "")]:
        if t.kind == "word":
            continue
        if t.kind == "sep" or (t.kind in _VALUE + ("lp",) and prev in _VALUE + ("rp",)):
            cur.append(side)
            if any(x.kind in _VALUE for s in cur for x in s):
                out.append(cur)
            cur, side = [], []
            if t.kind == "sep":
                prev = None
                continue
        if t.kind == "eq":
            cur.append(side)
            side = []
        else:
            side.append(t)
        prev = t.kind
    return out


@dataclass
class Side:
    """One side of a chain: its leaves, its value (None: it does not parse) and everything it computes."""

    leaves: list[Token]
    value: Value | None
    expression: bool  #: it has an operator between values
    computed: set = field(default_factory=set)  #: sub-expression values and partial sums / products
    text: str = ""


class _Parser:
    """Recursive descent over a side's tokens with the usual precedence; values are polynomials."""

    def __init__(self, toks: list[Token]):
        self.toks, self.i, self.computed = toks, 0, set()

    def peek(self) -> Token | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> Token:
        self.i += 1
        return self.toks[self.i - 1]

    def parse(self) -> Poly | None:
        v = self.sum()
        return v if self.i == len(self.toks) else None

    def sum(self) -> Poly | None:
        terms = [self.product()]
        signs = [1]
        while (t := self.peek()) is not None and t.kind == "op" and t.text in "+-":
            self.take()
            terms.append(self.product())
            signs.append(1 if t.text == "+" else -1)
        if any(x is None for x in terms):
            return None
        signed = [x if s > 0 else _add({}, x, -1) for x, s in zip(terms, signs)]
        self._together([x for x, s in zip(terms, signs) if s < 0], _add)  # 16 - 3 - 4 takes away 7
        return self._fold(signed, _add)

    def product(self) -> Poly | None:
        factors = [self.unary()]
        inverse = [False]
        while (t := self.peek()) is not None and t.kind == "op" and t.text in "*/":
            self.take()
            factors.append(self.unary())
            inverse.append(t.text == "/")
        if any(x is None for x in factors):
            return None
        if not any(inverse):
            return self._fold(factors, _mul)
        out = factors[0]  # a / b / c, left to right; the partial products use b^-1 where b is a constant
        flat = [factors[0]]
        for f, inv in zip(factors[1:], inverse[1:]):
            out = _div(out, f) if inv else _mul(out, f)
            if out is None:
                return None
            self.computed.add(key(out))
            if inv:  # dividing by 2 takes half: 1/2 is computed too (f is a nonzero constant here)
                f = _div(const(Fraction(1)), f)
                self.computed.add(key(f))
            flat.append(f)
        if all(f is not None for f in flat):
            self._partial(flat, _mul)
        self._together([f for f, inv in zip(factors, inverse) if inv], _mul)  # a / b / c divides by b * c
        return out

    def _together(self, parts: list[Poly], op) -> None:
        """The combination of every subset of two or more of ``parts`` (the terms taken away, the divisors)."""
        if 2 <= len(parts) <= MAX_TERMS:
            self.computed.update(key(reduce(op, g)) for r in range(2, len(parts) + 1) for g in combinations(parts, r))

    def _fold(self, parts: list[Poly], op) -> Poly:
        """``parts`` combined left to right; every running result and partial combination is computed."""
        running = list(accumulate(parts, op))
        self.computed.update(key(x) for x in running[1:])  # a lone part computes nothing
        self._partial(parts, op)
        return running[-1]

    def _partial(self, parts: list[Poly], op) -> None:
        """Every partial combination of two or more parts (all subsets up to :data:`MAX_TERMS`, else runs)."""
        n = len(parts)
        if n < 3:
            return
        if n <= MAX_TERMS:
            groups = [c for r in range(2, n) for c in combinations(parts, r)]
        else:
            groups = [parts[i:j] for i in range(n) for j in range(i + 2, n + 1) if j - i < n]
        self.computed.update(key(reduce(op, g)) for g in groups)

    def unary(self) -> Poly | None:
        t = self.peek()
        if t is not None and t.kind == "op" and t.text in "+-":
            self.take()
            v = self.unary()
            return None if v is None else (v if t.text == "+" else _add({}, v, -1))
        return self.power()

    def power(self) -> Poly | None:
        base = self.atom()
        t = self.peek()
        if base is not None and t is not None and t.kind == "op" and t.text == "^":
            self.take()
            e = self.unary()
            out = None if e is None else _pow(base, e)
            if out is not None:
                self.computed.add(key(out))
            return out
        return base

    def atom(self) -> Poly | None:
        t = self.peek()
        if t is None:
            return None
        if t.kind == "num":
            self.take()
            return const(t.number.value)
        if t.kind == "var":
            self.take()
            return {(t.text,): Fraction(1)}
        if t.kind == "lp":
            self.take()
            v = self.sum()
            if (r := self.peek()) is None or r.kind != "rp":
                return None
            self.take()
            if v is not None:
                self.computed.add(key(v))
            return v
        return None


def parse_side(toks: list[Token]) -> Side:
    """A side's value (module doc, step 3): operators before the first value or after the last one are dropped
    (a leading ``-`` is the value's sign); unbalanced parentheses are ignored when the side does not parse."""
    body = list(toks)
    while body and body[-1].kind == "op":
        body.pop()
    while body and body[0].kind == "op" and not (body[0].text == "-" and len(body) > 1):
        body.pop(0)
    leaves = [t for t in body if t.kind in _VALUE]
    expression = len(leaves) >= 2 and any(t.kind == "op" for t in body)
    text = " ".join(t.text for t in body)
    p = _Parser(body)
    v = p.parse() if body else None
    if v is None and any(t.kind in ("lp", "rp") for t in body):
        p = _Parser([t for t in body if t.kind not in ("lp", "rp")])
        v = p.parse()
    if v is None:
        return Side(leaves, None, expression, set(), text)
    return Side(leaves, key(v), expression, p.computed | {key(v)} if expression else set(), text)


# --- claims -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claims:
    """What a step states in numbers (module doc); every set holds canonical values (:data:`Value`)."""

    leaves: frozenset  #: numbers and variables written
    results: frozenset  #: values of the sides of chains with an expression
    computed: frozenset  #: results, sub-expression values, partial sums and products
    derivable: frozenset  #: leaves, computed values, written forms (25% -> 25 and 100)
    units: tuple  #: (value, unit) of each number outside an expression (unit None: no noun after it)
    bindings: tuple  #: (word, value): the word right before a number, when it says what the number is
    where: dict = field(default_factory=dict, compare=False, hash=False)  #: result -> the side that gives it

    @property
    def empty(self) -> bool:
        """No number and no variable: prose."""
        return not self.leaves

    def as_dict(self) -> dict:
        """The claims as JSON-ready lists of strings, numbers in order (``lrref verify --json``)."""
        def strs(vals) -> list[str]:
            order = sorted(vals, key=lambda v: (0, v, "") if isinstance(v, Fraction) else (1, 0, show(v)))
            return list(dict.fromkeys(show(v) for v in order))
        return {"numbers": strs(self.leaves), "results": strs(self.results), "computed": strs(self.computed),
                "units": sorted({f"{show(v)} {u}" for v, u in self.units if u}),
                "bindings": sorted({f"{w} {show(v)}" for w, v in self.bindings})}


def _singular(w: str) -> str:
    """A noun or verb as a key: lower case, a plural's singular (pages -> page, reads -> read), dollars -> dollar."""
    w = w.lower()
    if len(w) > 3 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        return w[:-1]
    return w


def _unit(toks: list[Token], i: int) -> str | None:
    """The unit of the number ``toks[i]``: the noun after it (``dollar``), with a rate when ``per``/``a``/``each``
    and a noun follow (``dollar/hour``); None when a small word or no word follows."""
    nxt = toks[i + 1] if i + 1 < len(toks) else None
    if nxt is None or nxt.kind != "word":
        return None
    w = _singular(nxt.text)
    if w in _SMALL or len(w) < 2:
        return None
    if i + 3 < len(toks) and toks[i + 2].kind == "word" and toks[i + 2].text.lower() in _RATE \
            and toks[i + 3].kind == "word" and toks[i + 3].text.lower() not in _SMALL:
        return f"{w}/{_singular(toks[i + 3].text)}"
    return w


def _signed(toks: list[Token], i: int) -> Fraction:
    """The value of the number ``toks[i]``, negative after a ``-`` that follows no value (words aside): ``is -5``,
    not ``10 apples - 5``."""
    v = toks[i].number.value
    if i == 0 or toks[i - 1].kind != "op" or toks[i - 1].text != "-":
        return v
    j = i - 2
    while j >= 0 and toks[j].kind == "word":
        j -= 1
    return v if j >= 0 and toks[j].kind in ("num", "rp", "var") else -v


def _units_and_bindings(toks: list[Token], operands: set[int]) -> tuple[list, list]:
    """For every number token not in ``operands`` (token indexes): (value, unit), and (word, value) when the word
    right before it says what it is (not a small word)."""
    units, bindings = [], []
    for i, t in enumerate(toks):
        if t.kind != "num" or i in operands:
            continue
        prev = toks[i - 1] if i > 0 else None
        if prev is not None and prev.kind == "word":
            w = _singular(prev.text)
            if w not in _SMALL and len(w) > 1:
                bindings.append((w, _signed(toks, i)))
        units.append((_signed(toks, i), _unit(toks, i)))
    return units, bindings


def claims(text: str) -> Claims:
    """The numeric claims of a step (module doc)."""
    toks = tokens(text)
    leaves, results, computed, derivable = set(), set(), set(), set()
    where: dict = {}
    operands: set[int] = set()
    index = {id(t): i for i, t in enumerate(toks)}
    for i, t in enumerate(toks):
        if t.kind == "num":
            leaves.add(_signed(toks, i))
            derivable.update(t.number.written)
            if t.number.form == "fraction":  # 10/2 is the division 10 / 2, written tight
                computed.add(t.number.value)
        elif t.kind == "var":
            leaves.add(key({(t.text,): Fraction(1)}))
    for chain in chains(toks):
        sides = [parse_side(s) for s in chain]
        if not any(s.expression for s in sides):
            continue
        for s in sides:
            if s.expression:
                operands.update(index[id(t)] for t in s.leaves if id(t) in index)
                computed |= s.computed
            if s.value is not None:
                results.add(s.value)
                where.setdefault(s.value, s.text)
    computed |= results
    derivable |= leaves | computed
    units, bindings = _units_and_bindings(toks, operands)
    return Claims(frozenset(leaves), frozenset(results), frozenset(computed), frozenset(derivable), tuple(units),
                  tuple(bindings), where)


# --- agreement --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Agreement:
    """Whether two steps state the same numeric claims; if not, which claim differs and how."""

    ok: bool
    reason: str  #: "same", "prose" (no numeric claim on either side), "equations", "numbers" or "units"
    detail: str = ""  #: the claim that differs, in words (``lrref verify``)


def _missing(a: frozenset, b: frozenset) -> list[Value]:
    return sorted(a - b, key=show)


OPTIONAL_UNITS = frozenset({"dollar"})  #: a unit a step may leave out (a currency sign is easy to drop)


def _same_unit(u: str, v: str) -> bool:
    """The same unit, or the same noun where one of the two gives no rate (``page/day`` and ``page``)."""
    return u == v or (u.split("/")[0] == v.split("/")[0] and ("/" not in u or "/" not in v))


def _units_differ(a: set, b: set) -> bool:
    """Two steps' units of one number differ: no pair of them is the same unit (:func:`_same_unit`; ``page/day``
    vs ``page/week`` differ), or there is a unit on one side only that is not :data:`OPTIONAL_UNITS` (``12 dollars
    per hour`` vs ``12``)."""
    if a and b:
        return not any(_same_unit(u, v) for u in a for v in b)
    return bool((a or b) - OPTIONAL_UNITS)


def _grouped(pairs: tuple) -> dict:
    """``(key, value)`` pairs as ``{key: {values}}``."""
    out: dict = {}
    for k, v in pairs:
        out.setdefault(k, set()).add(v)
    return out


def _unit_conflict(t: Claims, d: Claims) -> str:
    """The first number with another unit (or a unit on one side only), or a word binding disjoint numbers."""
    tu, du = _grouped(t.units), _grouped(d.units)
    for v in sorted(set(tu) & set(du), key=show):
        a, b = tu[v] - {None}, du[v] - {None}
        if _units_differ(a, b):
            side = lambda s: ", ".join(sorted(s)) or "no unit"  # noqa: E731
            return f"{show(v)}: {side(a)} in the target's step, {side(b)} in the draft"
    tb, db = _grouped(t.bindings), _grouped(d.bindings)
    for w in sorted(set(tb) & set(db)):
        if not tb[w] & db[w]:
            return (f"'{w}' {', '.join(map(show, sorted(tb[w])))} in the target's step, "
                    f"{', '.join(map(show, sorted(db[w])))} in the draft")
    return ""


def agree_claims(t: Claims, d: Claims) -> Agreement:
    """:func:`agree` on claims already extracted."""
    if t.empty and d.empty:
        return Agreement(True, "prose", "no number on either side")
    for a, b, who in ((d, t, "draft"), (t, d, "target's step")):
        other = "target's step" if who == "draft" else "draft"
        miss = _missing(a.results, b.computed)
        if miss:
            v = miss[0]
            return Agreement(False, "equations", f"the {who} computes {show(v)} ({a.where.get(v, '')}), "
                                                 f"which the {other} does not")
    for a, b, who in ((d, t, "draft"), (t, d, "target's step")):
        other = "target's step" if who == "draft" else "draft"
        miss = _missing(a.leaves, b.derivable)
        if miss:
            return Agreement(False, "numbers", f"the {who} states {', '.join(map(show, miss))}, which the {other} "
                                               "does not")
    conflict = _unit_conflict(t, d)
    if conflict:
        return Agreement(False, "units", conflict)
    return Agreement(True, "same", "the same numbers, results and units")


def agree(target: str, draft: str) -> Agreement:
    """Do the draft's numeric claims agree with the target's?  (module doc: equations, numbers, units)"""
    return agree_claims(claims(target), claims(draft))
