"""Surface statistics of a task's text for the estimator router: what a sentence embedding does not keep.

MiniLM embeds what a question is about, not how long it is or how many quantities and symbols it holds, and those
say how many steps it takes. The estimator reads them as one more candidate kind (`text`, orchestra/routing/select.py:
a logistic fit on these nine numbers, alone or blended), so cross-validation decides per run whether they help. On
seven two-model logs cut from MMLU-Pro (bench/quality.py `routers_sets=pair`, 5 splits each) the selection took them
on four or five splits of four logs, raised held-out APGR by 0.013-0.018 on three and left every other log within
0.001 (docs/quality.md, "The estimator router").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

NAMES = ("chars", "words", "numbers", "digits", "dollar", "backslashes", "operators", "sentence_marks",
         "distinct_words")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_OPERATOR = re.compile(r"[=+*/^<>]")
_WORD = re.compile(r"[a-z]+")


def text_stats(texts: Sequence[str]) -> np.ndarray:
    """[texts, len(NAMES)]: log1p of each count; `dollar` is 0/1 (LaTeX or money), not a count."""
    rows = []
    for t in texts:
        nums = _NUMBER.findall(t)
        rows.append([np.log1p(x) for x in (len(t), len(t.split()), len(nums), sum(map(len, nums)))]
                    + [float("$" in t)]
                    + [np.log1p(x) for x in (t.count("\\"), len(_OPERATOR.findall(t)), t.count(".") + t.count("?"),
                                             len(set(_WORD.findall(t.lower()))))])
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), len(NAMES))
