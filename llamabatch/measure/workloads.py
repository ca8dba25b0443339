"""The named workloads, as ChatML prompts made fresh for every round.

- **S** (shared instructions): a ~390-token system prompt shared by every item, then a
  50–150-token support ticket; replies up to 48 tokens. How most taggers write prompts.
- **U** (unique): prompts of 150–350 tokens sharing nothing but the ChatML header;
  replies up to 48 tokens.
- **L** (uneven replies): prompts asking for a list of 1 to 12 items; replies up to
  200 tokens, so their lengths differ a lot from item to item.

``prompts(n, tokenize, seed)`` is deterministic for a seed; give each round its own seed
so that no path can replay a cached prompt (the tickets and lists differ, the S system
prompt stays the same, as in a real backlog).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .workload import _SENTENCES, _SUBJECTS, chatml

Tokenize = Callable[[str], Sequence[int]]

_CATEGORIES = (
    "billing",
    "login",
    "shipping",
    "refund",
    "bug",
    "feature request",
    "account",
    "security",
    "performance",
    "other",
)
_RULES = (
    "Read the whole ticket before you answer, including any quoted messages.",
    "Choose exactly one category, the one that best describes what the customer needs.",
    "If the customer mentions money taken from them, prefer billing or refund.",
    "If the customer cannot sign in or receives no codes, prefer login or security.",
    "If something does not arrive or arrives damaged, prefer shipping.",
    "If the product behaves wrongly or crashes, prefer bug, not performance.",
    "If the product is merely slow, prefer performance.",
    "If the customer asks for something the product does not do yet, prefer feature request.",
    "If the ticket is about the customer's profile, plan or seats, prefer account.",
    "If no category fits, answer other; never invent a new category.",
    "Then give a short reason of at most one sentence, quoting the ticket if useful.",
    "Do not greet the customer, do not apologise and do not promise anything.",
    "Do not repeat the ticket and do not add any text after the reason.",
    "Tickets may be written in a hurry: ignore typos, signatures and disclaimers.",
    "A ticket may mention several problems: label the one the customer asks about.",
    "Urgency, tone and the customer's plan never change the category.",
)


def system_prompt_s(tokenize: Tokenize, target: int = 390) -> str:
    """The shared system prompt of workload S: the tagger's instructions, repeated
    rules added until it has about ``target`` tokens."""
    head = (
        "You are a support ticket tagger. Categories: "
        + ", ".join(_CATEGORIES)
        + ". Answer in the form 'category: reason'."
    )
    text, k = head, 0
    while len(tokenize(chatml(text, ""))) < target:
        text += " " + _RULES[k % len(_RULES)]
        k += 1
    return text


def _ticket(
    rng: random.Random, tokenize: Tokenize, lo: int, hi: int, wrap: Callable[[str], str]
) -> str:
    target = rng.randint(lo, hi)
    ticket = f"Ticket #{rng.randrange(10**6):06d}: {rng.choice(_SUBJECTS)}."
    pool: list[str] = []
    while len(tokenize(wrap(ticket))) < target:
        if not pool:
            pool = rng.sample(_SENTENCES, len(_SENTENCES))
        ticket += " " + pool.pop()
    return wrap(ticket)


@dataclass(frozen=True, slots=True)
class Workload:
    """A named workload: how its prompts are made and the reply cap.

    Attributes:
        name: "S", "U" or "L".
        max_tokens: most reply tokens per item.
        description: one line for reports.
    """

    name: str
    max_tokens: int
    description: str

    def prompts(self, n: int, tokenize: Tokenize, seed: int) -> list[str]:
        """``n`` prompts, deterministic for ``seed`` (lengths counted by ``tokenize``)."""
        rng = random.Random(f"{self.name}/{seed}")
        if self.name == "S":
            system = system_prompt_s(tokenize)
            n_system = len(tokenize(chatml(system, "")))
            request = "\n\nTag this ticket."
            return [
                _ticket(
                    rng,
                    tokenize,
                    n_system + 50,
                    n_system + 150,
                    lambda t: chatml(system, t + request),
                )
                for _ in range(n)
            ]
        if self.name == "U":
            request = "\n\nSummarize this support ticket in one short sentence."
            return [
                _ticket(rng, tokenize, 150, 350, lambda t: _user(t + request)) for _ in range(n)
            ]
        things = (
            "fruits",
            "colours",
            "countries in Europe",
            "animals that live in the sea",
            "programming languages",
            "musical instruments",
            "vegetables",
            "kitchen tools",
            "board games",
            "rivers",
            "cities in Asia",
            "sports",
        )
        out = []
        for _ in range(n):
            k = rng.randint(1, 12)
            out.append(
                _user(
                    f"List {k} {rng.choice(things)}, one per line, numbered, "
                    f"nothing else. (Request {rng.randrange(10**6):06d})"
                )
            )
        return out


def _user(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


#: The workloads by name.
WORKLOADS: dict[str, Workload] = {
    "S": Workload(
        "S",
        48,
        "~390-token system prompt shared by every item + a 50-150 "
        "token ticket, replies up to 48 tokens",
    ),
    "U": Workload("U", 48, "unique prompts of 150-350 tokens, replies up to 48 tokens"),
    "L": Workload("L", 200, "prompts asking for lists of 1 to 12 items, replies up to 200 tokens"),
}
