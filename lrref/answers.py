"""Final answers: GSM8K references (``#### N``) and the answer a model's text states, both normalised.

A number is normalised to its shortest exact form: thousands separators (``1,234``, ``1\\,234``, ``1{,}234``),
currency signs, ``%`` and trailing units or ``\\text{...}`` dropped; ``18.00`` -> ``18``; ``\\frac{3}{4}``,
``\\dfrac{3}{4}`` and ``3/4`` -> ``0.75``; ``.5`` -> ``0.5``.  The model's answer is the last ``\\boxed{...}``
(nested braces allowed; inside it, the whole content when it is one number, else its last number), else the
last number of the text.  Two answers agree when their normalised strings are equal.
"""

from __future__ import annotations

import re

_THOUSANDS = re.compile(r"(?<=\d)(?:\\,|\{,\}|,|\\ |\u202f|\u2009)(?=\d{3}(?!\d))")
_NUMBER = re.compile(r"-?(?:\d+(?:\.\d+)?|\.\d+)")
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


def norm_number(s: str) -> str | None:
    """One answer string normalised (``None`` when empty); a string that is not a number comes back cleaned."""
    s = strip_thousands(s)
    s = re.sub(r"\\(?:text|mathrm|textbf|mbox)\{[^}]*\}", "", s)
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = re.sub(r"[€£¥]|\\[,;!]|\\left|\\right", "", s).strip().rstrip(".").strip()
    if re.fullmatch(_NUMBER.pattern, s):
        return fmt(float(s))
    m = _FRAC.fullmatch(s) or _SLASH_FRAC.fullmatch(s)
    if m:
        return _fraction(m.group(1), m.group(2))
    return s or None


def gold_answer(answer: str) -> str | None:
    """The number after the last ``####`` (GSM8K's reference format), normalised."""
    if "####" not in answer:
        return None
    return norm_number(answer.rsplit("####", 1)[1])


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (nested braces allowed), None without one."""
    i = text.rfind("\\boxed{")
    if i < 0:
        return None
    j, depth = i + len("\\boxed{"), 1
    k = j
    while k < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[k], 0)
        k += 1
    return text[j:k - 1] if depth == 0 else None


def _last_number(s: str) -> str | None:
    s = strip_thousands(s)
    fr = list(_FRAC.finditer(s))
    nums = list(_NUMBER.finditer(s))
    if fr and (not nums or fr[-1].end() >= nums[-1].end()):
        return _fraction(fr[-1].group(1), fr[-1].group(2))
    return norm_number(nums[-1].group()) if nums else None


def extract_answer(text: str) -> str | None:
    """Final answer: the last ``\\boxed{...}``, else the last number in the text (normalised)."""
    b = last_boxed(text)
    if b is not None:
        n = norm_number(b)
        if n is not None and re.fullmatch(_NUMBER.pattern, n):
            return n
        return _last_number(b) or n
    return _last_number(text)


def is_correct(answer: str | None, gold: str | None) -> bool | None:
    """Whether the answer matches the reference (None without a reference)."""
    if gold is None:
        return None
    return answer is not None and answer == gold
