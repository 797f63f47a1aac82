"""Every prompt template of the text roles, in one place.

The LLM gateway wraps each prompt in its own system prompt (grounded with [n] citations when
passages are given, see `services/llm/providers/prompt.py`); these templates are the
user-side instruction. Sources:

- decompose: least-to-most prompting (Zhou et al. 2022, arXiv:2205.10625): the question reduced to
  simpler sub-questions, solved in order, each seeing the answers before it, then composed.
- refine: self-refine (Madaan et al. 2023, arXiv:2303.17651): feedback on the draft, then a
  revision, until the feedback finds nothing to fix.
- search over steps: LATS (Zhou et al. 2023, arXiv:2310.04406) and RAP (Hao et al. 2023,
  arXiv:2305.14992): the model proposes next steps and evaluates them (a self-evaluation prompt).
"""

from __future__ import annotations

import re

NO_ISSUES = "NO ISSUES"
"""What the critique answers when it finds nothing to fix; refine stops on it."""

DECOMPOSE = (
    "To answer the question below, first list the simpler sub-questions that must be answered "
    "before it, easiest first, one per line, each line starting with \"Q: \". List at most "
    "{max_parts}; do not answer them.\n\nQuestion: {question}"
)
SUB_ANSWER = (
    "Answered so far:\n{solved}\n\nAnswer this sub-question in one or two sentences: "
    "{sub_question}"
)
COMPOSE = (
    "Sub-questions and their answers:\n{solved}\n\nUsing them, answer the question. End with a "
    "line \"Answer: <the answer>\".\n\nQuestion: {question}"
)
CRITIQUE = (
    "Critique the draft answer to the question below: list every factual, logical or arithmetic "
    "error, missing part or unsupported claim, one per line. If there is nothing to fix, reply "
    "with exactly " + NO_ISSUES + ".\n\nQuestion: {question}\n\nDraft:\n{draft}"
)
REVISE = (
    "Rewrite the draft answer so that it fixes every point of the critique and keeps what was "
    "right. Reply with the revised answer only.\n\nQuestion: {question}\n\nDraft:\n{draft}\n\n"
    "Critique:\n{critique}"
)
PROPOSE_STEPS = (
    "Solve the problem one step at a time. Given the steps so far, propose up to {branching} "
    "different possible next steps, one per line, each line starting with \"Step: \". Write any "
    "arithmetic as an equation, for example 3 * 4 = 12. A step that finishes the solution must "
    "end with \"The answer is <answer>\".\n\nProblem: {question}\n\nSteps so far:\n{steps}"
)
EVALUATE_STEPS = (
    "Rate each candidate next step for the problem below from 0 (wrong or useless) to 10 "
    "(certainly right and useful). Reply with one line per candidate, \"<number>: <score>\", in "
    "order.\n\nProblem: {question}\n\nSteps so far:\n{steps}\n\nCandidates:\n{candidates}"
)
NONE_YET = "(none yet)"

_LINE_PREFIX = re.compile(r"^\s*(?:[-*]|\d+[.)])?\s*")
_QUESTION = re.compile(r"(?i)^\s*(?:[-*]|\d+[.)])?\s*(?:q\d*|sub-?question\s*\d*)\s*[:.]\s*(.+)$")
_STEP = re.compile(r"(?i)^\s*(?:[-*]|\d+[.)])?\s*step\s*\d*\s*[:.]\s*(.+)$")
_SCORE = re.compile(r"^\s*(?:candidate\s*)?(\d+)\s*[:.)=-]\s*(-?\d+(?:\.\d+)?)")


def numbered(items: list[str]) -> str:
    """Items as "1. item" lines; `NONE_YET` when empty."""
    return "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1)) or NONE_YET


def solved(pairs: list[tuple[str, str]]) -> str:
    """Sub-questions with their answers as "Q: ... / A: ..." lines; `NONE_YET` when empty."""
    return "\n".join(f"Q: {q}\nA: {a}" for q, a in pairs) or NONE_YET


def parse_sub_questions(text: str, max_parts: int) -> list[str]:
    """The "Q: ..." lines of a DECOMPOSE reply, in order, duplicates dropped, at most
    `max_parts`; without any, the reply's non-empty lines ending in "?"."""
    return _lines(text, _QUESTION, max_parts,
                  lambda line: line.rstrip().endswith("?"))


def parse_steps(text: str, branching: int) -> list[str]:
    """The "Step: ..." lines of a PROPOSE_STEPS reply, in order, duplicates dropped, at most
    `branching`; without any, the reply's non-empty lines."""
    return _lines(text, _STEP, branching, lambda line: bool(line.strip()))


def _lines(text: str, marked: re.Pattern[str], limit: int, fallback) -> list[str]:
    found = [m.group(1).strip() for line in text.splitlines() if (m := marked.match(line))]
    if not found:
        found = [_LINE_PREFIX.sub("", line).strip() for line in text.splitlines()
                 if fallback(line)]
    unique = list(dict.fromkeys(item for item in found if item))
    return unique[:limit]


def parse_scores(text: str, count: int) -> list[float | None]:
    """The scores of an EVALUATE_STEPS reply for candidates 1..count, each scaled from 0..10 to
    [0, 1] and clipped; None for a candidate the reply did not score."""
    scores: list[float | None] = [None] * count
    for line in text.splitlines():
        match = _SCORE.match(line)
        if match and 1 <= int(match.group(1)) <= count and scores[int(match.group(1)) - 1] is None:
            scores[int(match.group(1)) - 1] = min(1.0, max(0.0, float(match.group(2)) / 10.0))
    return scores


def finds_nothing(critique: str) -> bool:
    """Whether a CRITIQUE reply found nothing to fix: it starts with NO ISSUES (any case, any
    punctuation after)."""
    return re.sub(r"[^A-Z ]", " ", critique.upper()).split()[:2] == NO_ISSUES.split()
