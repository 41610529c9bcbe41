"""What a reasoning step states in numbers: its equations and its numbers, extracted and normalised (no model).

The ``math`` verifier (:class:`lrref.verify.verifiers.MathVerifier`) accepts a draft step only when its numeric claims
agree with the target's step at the same position (:func:`agree`), then checks the prose with the embedding
cosine.  Extraction (:func:`claims`):

1. *Normalise the text*: markdown emphasis and step labels at a line's start (``Step 2:``, ``2.``, ``### Step 2``)
   are dropped; LaTeX ``\\frac{a}{b}`` becomes ``(a / b)``, ``\\times``/``\\cdot`` ``*``, ``\\div`` ``/``,
   ``\\approx`` ``=``, ``\\text{...}`` its words, other commands and braces nothing; ``×``, ``·``, ``x`` between
   numbers and the words ``times``/``multiplied by`` are ``*``, ``÷`` and ``divided by`` ``/``, ``plus`` ``+``,
   ``minus`` and the minus signs ``−``/``–`` ``-``, ``equals``/``is equal to`` ``=``; a unit ratio (``pages/day``,
   ``$/hour``) is a word, not a division; a hyphen between a number and a word (``2-hour``) is a space.
2. *Numbers*: thousands separators (``1,234``, ``1\\,234``, ``1{,}234``) and currency signs are dropped, decimals
   are exact fractions (``1.50`` = ``1.5``), ``p%``/``p percent`` is ``p/100`` (``25% of 80`` reads
   ``0.25 * 80``), the words one..ninety-nine, ``dozen`` (12), ``half`` (1/2) and ``twice`` (2) are numbers
   (``in one day`` vs ``in 2 weeks`` is a different quantity; ``one of them`` counts too, the cautious side).
3. *Equations*: words are dropped; numbers, operators (``+ - * / ^``), parentheses and ``=`` that follow each
   other form a chain; punctuation (``, ; : . ! ?`` and line breaks) and two numbers in a row without an operator
   end it.  A chain's sides are split at ``=``; a side with two or more numbers and an operator is an
   *expression*.  Every expression gives one equation: the sorted multiset of its operators, the sorted multiset
   of its operands, and the chain's stated value (its last side that is a single number; None without one).  So
   ``2 x 7 = 14`` and ``7*2=14`` are the same equation ``((*), (2, 7), 14)``, ``18 x 2 = 36`` another one, and
   ``120 - (45 + 38) = 37`` differs from ``120 - 45 - 38 = 37`` (other operators): a different way of writing the
   same computation is rejected, the cheap side of the trade-off.

:func:`agree`: the two steps state the same *set* of equations and the same *set* of numbers (every number
either states, given in the question or new: a draft that drops ``half`` or a price the target's step names is
another step).  A pair of steps with no number on either side agrees vacuously: the embedding cosine alone
decides it.  The rule needs no context, so it is the same in every mode.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from ..answers import strip_thousands

Equation = tuple[tuple[str, ...], tuple[Fraction, ...], Fraction | None]

_UNITS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}
_TEENS = {"ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
          "seventeen": 17, "eighteen": 18, "nineteen": 19}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
         "ninety": 90}
_WORDS = _UNITS | _TEENS | _TENS | {"dozen": 12, "twice": 2}
_NUMBER_WORD = re.compile(r"\b(?:({})[- ]({})|({}))\b".format("|".join(_TENS), "|".join(_UNITS), "|".join(_WORDS)),
                          re.IGNORECASE)
_TOKEN = re.compile(r"(?P<num>(?:\d+(?:\.\d+)?|\.\d+)(?:\s*%)?)|(?P<op>[-+*/^])|(?P<eq>=)|(?P<lp>\()|(?P<rp>\))"
                    r"|(?P<x>\b[xX]\b)|(?P<word>[A-Za-z_]+)|(?P<sep>[,;:!?\n]|\.(?!\d))")
_REPLACE = (  # (pattern, replacement), in order: markdown and labels, LaTeX, symbols, words
    (r"\*\*|__|`", " "),
    (r"(?im)^[ \t>#]*(?:step\s*\d+\s*[:.)-]?|\d+[.)](?=\s))", " "), (r"(?m)^[ \t]*[-*+>]\s+", " "),
    (r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r" ( \1 / \2 ) "),
    (r"\\(?:text|mathrm|textbf|mbox|operatorname)\s*\{([^{}]*)\}", r" \1 "),
    (r"\\(?:times|cdot|ast)(?![A-Za-z])", " * "), (r"\\div(?![A-Za-z])", " / "),
    (r"\\approx(?![A-Za-z])", " = "), (r"\\%", "%"), (r"\\[,;!: ]", ""),
    (r"\\[A-Za-z]+|\\.|[{}$€£¥]", " "),
    ("[×✕⋅·∙]", " * "), ("[÷∕]", " / "), ("[−–]", " - "), ("[≈]", " = "), ("\u00a0", " "),
    (r"(?<=\d)\s*[xX]\s*(?=\d)", " * "), (r"(?<=\d)-(?=[A-Za-z])", " "), (r"/\s*[A-Za-z]+", " "),
    (r"(?i)\b(?:multiplied\s+by|times)\b", " * "), (r"(?i)\bdivided\s+by\b", " / "), (r"(?i)\bplus\b", " + "),
    (r"(?i)\bminus\b", " - "), (r"(?i)\b(?:equals|is\s+equal\s+to)\b", " = "),
    (r"(?i)%\s*of\b", "% * "), (r"(?i)\s*\bper\s*cent\b|\s*\bpercent\b", "%"), (r"(?i)\bhalf\s+of\b", " 0.5 * "),
    (r"(?i)\bhalf\b", " 0.5 "),
)
_REPLACE_RE = tuple((re.compile(p), r) for p, r in _REPLACE)


@dataclass(frozen=True)
class Claims:
    """A step's equations (see the module doc) and every number it states."""

    equations: frozenset
    numbers: frozenset


def _word_number(m: re.Match) -> str:
    if m.group(1):
        return f" {_TENS[m.group(1).lower()] + _UNITS[m.group(2).lower()]} "
    return f" {_WORDS[m.group(3).lower()]} "


def normalise(text: str) -> str:
    """The text with its numbers, operators and ``=`` in plain ASCII (module doc, step 1 and 2)."""
    s = text
    for rx, rep in _REPLACE_RE[:5]:  # markdown, labels and LaTeX groups before thousands separators
        s = rx.sub(rep, s)
    s = strip_thousands(s)
    for rx, rep in _REPLACE_RE[5:]:
        s = rx.sub(rep, s)
    return _NUMBER_WORD.sub(_word_number, s)


def _value(tok: str) -> Fraction:
    pct = tok.endswith("%")
    v = Fraction(tok.rstrip("%").strip())
    return v / 100 if pct else v


def tokens(text: str) -> list[tuple[str, object]]:
    """``(kind, value)`` tokens of the normalised text: num (a Fraction), op, eq, lp, rp, sep; words dropped, an
    ``x`` between a number (or ``)``) and a number (or ``(``) read as ``*``."""
    raw = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(normalise(text)) if m.lastgroup != "word"]
    out: list[tuple[str, object]] = []
    for i, (kind, s) in enumerate(raw):
        if kind == "x":
            before = out[-1][0] if out else None
            after = raw[i + 1][0] if i + 1 < len(raw) else None
            if before in ("num", "rp") and after in ("num", "lp"):
                out.append(("op", "*"))
            continue
        out.append((kind, _value(s) if kind == "num" else s))
    return out


def chains(toks: list[tuple[str, object]]) -> list[list[list[tuple[str, object]]]]:
    """Chains of sides: split at punctuation and at two numbers without an operator between them, then at ``=``."""
    out, cur, side = [], [], []
    prev = None
    for kind, v in toks + [("sep", "")]:
        if kind == "sep" or (kind in ("num", "lp") and prev in ("num", "rp")):
            cur.append(side)
            if any(k == "num" for s in cur for k, _ in s):
                out.append(cur)
            cur, side = [], []
            if kind == "sep":
                prev = None
                continue
        if kind == "eq":
            cur.append(side)
            side = []
        elif kind != "sep":
            side.append((kind, v))
        prev = kind
    return out


def _side(side: list[tuple[str, object]]) -> tuple[list[str], list[Fraction]]:
    """A side's operators and operands: parentheses ignored, a leading ``-`` before a number is its sign,
    other operators before the first or after the last number dropped."""
    toks = [(k, v) for k, v in side if k in ("num", "op")]
    sign = 1
    while toks and toks[0][0] == "op":
        sign = -1 if toks[0][1] == "-" and len(toks) > 1 and toks[1][0] == "num" else 1
        toks = toks[1:]
    while toks and toks[-1][0] == "op":
        toks = toks[:-1]
    nums = [v for k, v in toks if k == "num"]
    if nums:
        nums[0] = sign * nums[0]
    return [v for k, v in toks if k == "op"], nums


def equations(chain: list[list[tuple[str, object]]]) -> set:
    """The equations of one chain (module doc, step 3)."""
    sides = [_side(s) for s in chain]
    singles = [nums[0] for ops, nums in sides if len(nums) == 1 and not ops]
    stated = singles[-1] if singles and len(sides) > 1 else None
    out = set()
    for ops, nums in sides:
        if len(nums) >= 2 and ops and len(sides) > 1:
            out.add((tuple(sorted(ops)), tuple(sorted(nums)), stated))
    return out


def claims(text: str) -> Claims:
    """The equations and numbers a step states (module doc)."""
    toks = tokens(text)
    eqs: set = set()
    for ch in chains(toks):
        eqs |= equations(ch)
    return Claims(frozenset(eqs), frozenset(_signed_numbers(toks)))


def _signed_numbers(toks: list[tuple[str, object]]) -> list[Fraction]:
    """Every number of the step; a ``-`` right before a number that follows no number is its sign."""
    out = []
    for i, (kind, v) in enumerate(toks):
        if kind == "num":
            neg = i > 0 and toks[i - 1] == ("op", "-") and (i < 2 or toks[i - 2][0] not in ("num", "rp"))
            out.append(-v if neg else v)
    return out


@dataclass(frozen=True)
class Agreement:
    """Whether two steps state the same numeric claims, and if not, which differ."""

    ok: bool
    reason: str  #: "same", "equations" or "numbers"


def agree(target: str, draft: str) -> Agreement:
    """Do the draft's numeric claims agree with the target's?  The same set of equations and the same set of
    numbers (module doc)."""
    t, d = claims(target), claims(draft)
    if t.equations != d.equations:
        return Agreement(False, "equations")
    if t.numbers != d.numbers:
        return Agreement(False, "numbers")
    return Agreement(True, "same")
