"""Final answers: GSM8K references (``#### N``) and the answer a model's text states, both normalised.

A number is normalised to its shortest exact form: thousands separators (``1,234``, ``1\\,234``, ``1{,}234``),
currency signs, ``%`` and trailing units or ``\\text{...}`` dropped; ``18.00`` -> ``18``; ``\\frac{3}{4}``,
``\\dfrac{3}{4}`` and ``3/4`` -> ``0.75``; mixed numbers ``2\\frac{1}{2}`` and ``2 1/2`` -> ``2.5``; ``.5`` -> ``0.5``;
an arithmetic expression of numbers (``10 - 2``, ``3 \\times 4``) -> its value.  The model's answer is the last
non-empty ``\\boxed{...}`` (nested braces allowed): its content when that is one number or an expression, its one
number among words (``18 \\text{ dollars}``), else the content itself, cleaned (``5 hours and 30 minutes`` names two
quantities: no number is picked).  Without a box, the answer is the last number of the text; a ``-`` right after a
digit or a letter is a hyphen or a subtraction, not a sign (``16-3-4`` ends with 4).  Two answers agree when their
normalised strings are equal.
"""

from __future__ import annotations

import ast
import operator
import re
from fractions import Fraction

_THOUSANDS = re.compile(r"(?<=\d)(?:\\,|\{,\}|,|\\ |\u202f|\u2009)(?=\d{3}(?!\d))")
_NUMBER = re.compile(r"-?(?:\d+(?:\.\d+)?|\.\d+)")
_TEXT_NUMBER = re.compile(r"(?:(?<![\w).])-)?(?:\d+(?:\.\d+)?|\.\d+)")  # in prose: 16-3-4 is not -4
_MIXED = re.compile(r"(\d+)\s*(?:\\[dt]?frac\{\s*(\d+)\s*\}\{\s*(\d+)\s*\}|\s(\d+)\s*/\s*(\d+))")
_FRAC = re.compile(r"\\[dt]?frac\{\s*(-?\d+(?:\.\d+)?)\s*\}\{\s*(\d+(?:\.\d+)?)\s*\}")
_SLASH_FRAC = re.compile(r"(-?\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)")


def fmt(x: float) -> str:
    """An integer without decimals, else 6 significant digits."""
    return str(int(round(x))) if abs(x - round(x)) < 1e-9 else f"{x:.6g}"


def strip_thousands(s: str) -> str:
    """``1,234`` / ``1\\,234`` / ``1{,}234`` -> ``1234`` (a separator followed by exactly three digits)."""
    prev = None
    while prev != s:  # 1,234,567: each pass removes the separators it can see
        prev, s = s, _THOUSANDS.sub("", s)
    return s


def _fraction(a: str, b: str) -> str | None:
    return fmt(float(a) / float(b)) if float(b) else None


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _arithmetic(node: ast.AST) -> Fraction:
    """The exact value of an expression of numbers, ``+ - * /`` and parentheses (ValueError: anything else)."""
    if isinstance(node, ast.Expression):
        return _arithmetic(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _arithmetic(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        a, b = _arithmetic(node.left), _arithmetic(node.right)
        if isinstance(node.op, ast.Div) and b == 0:
            raise ValueError("division by zero")
        return _OPS[type(node.op)](a, b)
    raise ValueError("not arithmetic")


def _evaluate(s: str) -> str | None:
    """``s`` as an arithmetic expression of numbers (LaTeX operators allowed), formatted; None when it is not one."""
    e = re.sub(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", s)
    e = re.sub(r"\\(?:times|cdot)|[×·]", "*", e).replace("\\div", "/").replace("÷", "/").replace("−", "-")
    if not re.fullmatch(r"[\d.\s+\-*/()]+", e) or not re.search(r"\d\s*[-+*/]\s*[\d(.]|\)\s*[-+*/]", e):
        return None
    try:
        return fmt(float(_arithmetic(ast.parse(e.strip(), mode="eval"))))
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None


def norm_number(s: str) -> str | None:
    """One answer string normalised (``None`` when empty); a string that is not a number comes back cleaned."""
    s = strip_thousands(s)
    s = re.sub(r"\\(?:text|mathrm|textbf|mbox)\{[^}]*\}", "", s)
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = re.sub(r"[€£¥]|\\[,;!]|\\left|\\right", "", s).strip().rstrip(".").strip()
    if re.fullmatch(_NUMBER.pattern, s):
        return fmt(float(s))
    m = _MIXED.fullmatch(s)
    if m:
        a, b = (m.group(2), m.group(3)) if m.group(2) else (m.group(4), m.group(5))
        return fmt(float(m.group(1)) + float(a) / float(b)) if float(b) else None
    m = _FRAC.fullmatch(s) or _SLASH_FRAC.fullmatch(s)
    if m:
        return _fraction(m.group(1), m.group(2))
    return _evaluate(s) or s or None


def gold_answer(answer: str) -> str | None:
    """The number after the last ``####`` (GSM8K's reference format), normalised."""
    if "####" not in answer:
        return None
    return norm_number(answer.rsplit("####", 1)[1])


def boxes(text: str) -> list[str]:
    """The contents of every complete ``\\boxed{...}`` (nested braces allowed), in order."""
    out, i = [], text.find("\\boxed{")
    while i >= 0:
        j = k = i + len("\\boxed{")
        depth = 1
        while k < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
        if depth == 0:
            out.append(text[j:k - 1])
        i = text.find("\\boxed{", k if depth == 0 else j)
    return out


def last_boxed(text: str) -> str | None:
    """The content of the last non-empty ``\\boxed{...}``, None without one."""
    full = [b for b in boxes(text) if b.strip()]
    return full[-1] if full else None


def _last_number(s: str) -> str | None:
    s = strip_thousands(s)
    fr = list(_FRAC.finditer(s))
    nums = list(_TEXT_NUMBER.finditer(s))
    if fr and (not nums or fr[-1].end() >= nums[-1].end()):
        return _fraction(fr[-1].group(1), fr[-1].group(2))
    return norm_number(nums[-1].group()) if nums else None


def extract_answer(text: str) -> str | None:
    """Final answer: the last non-empty ``\\boxed{...}``, else the last number in the text (module doc)."""
    b = last_boxed(text)
    if b is None:
        return _last_number(text)
    n = norm_number(b)
    if n is not None and re.fullmatch(_NUMBER.pattern, n):
        return n
    words = re.sub(r"\\(?:text|mathrm|textbf|mbox)\{([^}]*)\}", r" \1 ", strip_thousands(b))
    nums = _TEXT_NUMBER.findall(words)
    if len(nums) == 1:  # one number among words: 18 \text{ dollars}
        return norm_number(nums[0])
    return n


def is_correct(answer: str | None, gold: str | None) -> bool | None:
    """Whether the answer matches the reference (None without a reference)."""
    if gold is None:
        return None
    return answer is not None and answer == gold
