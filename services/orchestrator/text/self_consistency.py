"""Self-consistency for text queries (Wang et al. 2022, arXiv:2203.11171): sample several drafts at
a temperature above 0, extract and normalise each draft's final answer, and take the majority.

One `Sampling` holds the state of one request: the drafts so far, the vote over their answers, the
request's budgets (tokens, US dollars) and the reason sampling stopped. The LLM agent
(`agents/llm.py`) samples a batch per consensus-loop iteration; the loop asks for another batch
while the winning answer's vote share is below the agreement threshold and the budgets allow one
more draft (`Sampling.next_batch`). Drafts of the offline provider are extractive, not a language
model's: they are listed but never vote.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

MAX_ANSWER_CHARS = 200
"""Longest normalised answer kept (a draft without a marked answer votes its last line)."""

_MARKED = (
    re.compile(r"####\s*([^\n]+)"),                      # GSM8K's reference format
    re.compile(r"\\boxed\{([^{}]*)\}"),                  # LaTeX boxed answers
    re.compile(r"(?i)final answer\s*(?:is|:)\s*([^\n]+)"),
    re.compile(r"(?i)\banswer\s*(?:is|:)\s*([^\n]+)"),
)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_PUNCTUATION = re.compile(r"[^\w\s-]")


def normalise_number(text: str) -> str:
    """A number as one spelling: thousands separators dropped, trailing zeros of a decimal and a
    bare decimal point dropped ("1,000.50" -> "1000.5", "42.0" -> "42")."""
    number = text.replace(",", "")
    if "." in number:
        number = number.rstrip("0").rstrip(".")
    if number in ("", "-"):
        number = "0"
    return "0" if number == "-0" else number


def normalise_text(text: str) -> str:
    """Lower case, punctuation dropped, whitespace collapsed, at most `MAX_ANSWER_CHARS`."""
    return " ".join(_PUNCTUATION.sub(" ", text.lower()).split())[:MAX_ANSWER_CHARS]


def extract_answer(draft: str) -> str:
    """The final answer of a draft, normalised so that equal answers compare equal.

    The last marked answer wins ("#### 42", "\\boxed{42}", "final answer: 42", "the answer is
    42"); a marked answer holding a number is that number (`normalise_number`), else its text
    (`normalise_text`). Without a mark: the last number of the draft, else its last non-empty line
    as text. "" for a draft with none of these.
    """
    for pattern in _MARKED:
        matches = pattern.findall(draft)
        if matches:
            marked = matches[-1]
            number = _NUMBER.search(marked)
            return normalise_number(number.group()) if number else normalise_text(marked)
    numbers = _NUMBER.findall(draft)
    if numbers:
        return normalise_number(numbers[-1])
    lines = [line for line in draft.splitlines() if line.strip()]
    return normalise_text(lines[-1]) if lines else ""


@dataclass(frozen=True)
class SampledDraft:
    """One draft as sampled.

    Attributes:
        text: the generated text.
        answer: `extract_answer(text)`; "" for an offline draft (it does not vote).
        iteration: consensus-loop iteration (1-based) that sampled it.
        provider, model: who answered.
        total_tokens: prompt plus completion tokens as the provider reported them.
        cost_usd: US dollars from the gateway's prices; None when the model has none.
        offline: drafted by the offline extractive provider (never a vote).
        prompt_tokens, completion_tokens: the two parts of `total_tokens`.
    """

    text: str
    answer: str
    iteration: int
    provider: str
    model: str
    total_tokens: int
    cost_usd: float | None
    offline: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def votes(self) -> bool:
        """Whether this draft is a vote: a language model's draft with an answer."""
        return not self.offline and bool(self.answer)


@dataclass(frozen=True)
class SamplingOptions:
    """Self-consistency settings of one request.

    Attributes:
        sample_count: drafts per batch (k), >= 1.
        temperature: sampling temperature, 0..2.
        agreement: vote share of the winning answer that ends sampling, in (0, 1].
        max_tokens: token budget of the request (prompt plus completion), None for none.
        max_cost_usd: cost budget in US dollars, None for none.
        draft_tokens: the `max_tokens` asked of each draft.
    """

    sample_count: int
    temperature: float
    agreement: float
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    draft_tokens: int = 512

    def __post_init__(self) -> None:
        if self.sample_count < 1:
            raise ValueError("sample_count must be >= 1")
        if not (math.isfinite(self.temperature) and 0.0 <= self.temperature <= 2.0):
            raise ValueError("temperature must be in 0..2")
        if not 0.0 < self.agreement <= 1.0:
            raise ValueError("agreement must be in (0, 1]")


@dataclass
class Sampling:
    """The drafts of one request and the decision to sample more.

    Attributes:
        options: k, temperature, agreement threshold and budgets.
        drafts: every draft so far, in order.
        offline: only the offline provider answered (no language model: no vote, no more drafts).
        stop_reason: why sampling stopped; "" while it may go on.
    """

    options: SamplingOptions
    drafts: list[SampledDraft] = field(default_factory=list)
    offline: bool = False
    stop_reason: str = ""

    def add(self, drafts: list[SampledDraft]) -> None:
        """Records a batch; a batch with no language-model draft marks the request offline."""
        self.drafts.extend(drafts)
        if drafts and all(draft.offline for draft in drafts) \
                and not any(not draft.offline for draft in self.drafts):
            self.offline = True

    def tally(self) -> Counter[str]:
        """Votes per answer, in the order answers were first drafted."""
        return Counter(draft.answer for draft in self.drafts if draft.votes)

    def winner(self) -> str | None:
        """The answer with the most votes (the first drafted among equals); None without votes."""
        counts = self.tally()
        return max(counts, key=lambda answer: counts[answer]) if counts else None

    def share(self) -> float:
        """The winning answer's vote share in [0, 1] (0 without votes)."""
        counts = self.tally()
        total = sum(counts.values())
        return counts[self.winner()] / total if total else 0.0

    def winning_draft(self) -> SampledDraft | None:
        """The first draft whose answer is the winner."""
        winner = self.winner()
        return next((draft for draft in self.drafts if draft.votes and draft.answer == winner),
                    None)

    @property
    def total_tokens(self) -> int:
        return sum(draft.total_tokens for draft in self.drafts)

    @property
    def prompt_tokens(self) -> int:
        return sum(draft.prompt_tokens for draft in self.drafts)

    @property
    def completion_tokens(self) -> int:
        return sum(draft.completion_tokens for draft in self.drafts)

    @property
    def cost_usd(self) -> float:
        """US dollars of the drafts with a price (see `cost_known`)."""
        return sum(draft.cost_usd for draft in self.drafts if draft.cost_usd is not None)

    @property
    def cost_known(self) -> bool:
        """Every language-model draft's model has a price."""
        return all(draft.cost_usd is not None for draft in self.drafts if not draft.offline)

    def next_batch(self) -> int:
        """Drafts to sample in the next iteration: 0 stops (and sets `stop_reason`).

        The first batch is k drafts. After it, sampling stops when the request is offline, when
        the winner's vote share reaches the agreement threshold, or when not one more draft fits
        the budgets; a draft is projected to cost as much as the largest draft so far (tokens and
        dollars), and the batch is k drafts or as many as fit, whichever is fewer.
        """
        k = self.options.sample_count
        if not self.drafts:
            return k
        if self.offline:
            self.stop_reason = "offline: the extractive provider answered, no language model"
            return 0
        share = self.share()
        if share >= self.options.agreement:
            self.stop_reason = f"agreement {share:.2f} >= {self.options.agreement:.2f}"
            return 0
        fit = k
        if self.options.max_tokens is not None:
            largest = max(draft.total_tokens for draft in self.drafts)
            left = self.options.max_tokens - self.total_tokens
            fit = min(fit, left // largest if largest > 0 else k)
            if fit <= 0:
                self.stop_reason = (f"token budget: {self.total_tokens} of "
                                    f"{self.options.max_tokens} used, another draft would need "
                                    f"about {largest}")
                return 0
        if self.options.max_cost_usd is not None:
            if not self.cost_known:
                unpriced = sorted({draft.model for draft in self.drafts
                                   if draft.cost_usd is None and not draft.offline})
                self.stop_reason = ("cost budget: no price configured for "
                                    f"{', '.join(unpriced)} (LLM_PRICES)")
                return 0
            largest_cost = max(draft.cost_usd or 0.0 for draft in self.drafts)
            left_usd = self.options.max_cost_usd - self.cost_usd
            if largest_cost > 0:
                fit = min(fit, math.floor(left_usd / largest_cost + 1e-9))
            if fit <= 0:
                self.stop_reason = (f"cost budget: ${self.cost_usd:.6f} of "
                                    f"${self.options.max_cost_usd:.6f} used, another draft "
                                    f"would cost about ${largest_cost:.6f}")
                return 0
        return fit

    def wants_more(self) -> bool:
        """Whether another batch would be sampled (`next_batch` > 0), without consuming it."""
        return self.next_batch() > 0

    def vote_rationale(self) -> str:
        """A few words for the LLM agent's vote: the tally and the share."""
        counts = self.tally()
        total = sum(counts.values())
        shown = ", ".join(f"{answer!r}: {count}" for answer, count in counts.most_common(5))
        return (f"self-consistency: {total} vote(s) of {len(self.drafts)} draft(s) "
                f"({shown}); share {self.share():.2f}")
