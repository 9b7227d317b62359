"""Repeated questions in a routing log: which of a model's several records of one question is kept, and the counts.

Real logs repeat questions: the same item filed under two subjects, a resampled or rerun evaluation appended to the
first. routing_log.py gathers every record of a (question, model) pair (the same question: the same id where the log
gives ids, else the same prompt text, character for character) and asks `settle` which one to keep. A record's
verdict is right or wrong as the replay reads it (score >= 0.5); records are compared after any judging.
* All records agree: they are merged. The first record is kept (its text, tokens and $ too): nothing is lost.
* They disagree (a conflict), by `rule` (`--duplicates`):
  majority (the default)  the verdict most records give; the first record with it is kept, so its text, tokens and
                          $ match the verdict. A tie (one right, one wrong: the usual case of two records) keeps
                          the first record, as `first` does, and is counted apart.
  first                   the first record, whatever the later ones say (pandas' drop_duplicates(keep="first")).
  error                   stop with one line naming both rows.
Why majority by default: a user who concatenates runs means every record to count, and a vote is what "the model
gets this one right" means when runs disagree; ties fall back to file order, the one order the user chose. A
conflict is never silent: the counts (`Repeats`) are printed, and `error` stops at the first one.
"""

from __future__ import annotations

from dataclasses import dataclass

DUPLICATE_RULES = ("majority", "first", "error")
DEFAULT_DUPLICATES = "majority"


@dataclass
class Repeats:
    """What settling repeated records did (all zero for a log without repeats)."""

    rule: str = DEFAULT_DUPLICATES
    questions: int = 0  # questions met in more than one row
    merged: int = 0  # (question, model) pairs recorded more than once with one verdict: merged
    conflicts: int = 0  # pairs whose records disagree: settled by `rule`
    ties: int = 0  # conflicts a majority could not decide: the first record kept
    overruled: int = 0  # records dropped whose verdict differs from the kept record's
    families: int = 0  # repeated questions filed under two or more families: each keeps its first
    shared_prompts: int = 0  # prompts under two or more ids: separate questions, since ids name questions

    def __bool__(self) -> bool:
        return bool(self.questions or self.shared_prompts)

    def summary(self) -> str:
        """One line for the converter's printout."""
        parts = [f"{self.questions} questions met more than once",
                 f"{self.merged} repeated answers (question x model) gave the same verdict each time: merged"]
        if self.conflicts:
            how = f"{self.conflicts} gave conflicting verdicts: settled by --duplicates {self.rule}"
            if self.rule == "majority":
                how += f" ({self.conflicts - self.ties} by vote, {self.ties} ties: the first record kept)"
            parts.append(f"{how}, {self.overruled} records overruled")
        else:
            parts.append("none gave conflicting verdicts")
        if self.families:
            parts.append(f"{self.families} filed under two families: each keeps its first")
        if self.shared_prompts:
            parts.append(f"{self.shared_prompts} prompts appear under several ids and stay separate questions "
                         "(ids name questions)")
        return "repeats: " + "; ".join(parts)


def settle(verdicts: list[bool], rule: str) -> tuple[int, bool]:
    """(index of the record to keep, whether the vote tied) for one pair's records in file order; `verdicts` has
    two or more entries that disagree (agreeing records are merged by the caller). `error` is the caller's."""
    if rule == "first":
        return 0, False
    if rule != "majority":
        raise ValueError(f"settle: rule {rule!r} (use {' or '.join(DUPLICATE_RULES[:2])})")
    right = sum(verdicts)
    if 2 * right == len(verdicts):
        return 0, True
    return verdicts.index(2 * right > len(verdicts)), False
