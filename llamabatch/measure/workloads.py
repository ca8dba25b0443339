"""The synthetic workloads, as ChatML prompts made fresh for every round.

- **S** (shared instructions): a ~390-token system prompt shared by every item, then a
  50–150-token support ticket; replies up to 48 tokens. How most taggers write prompts.
- **U** (unique): prompts of 150–350 tokens sharing nothing but the ChatML header;
  replies up to 48 tokens.
- **L** (uneven replies): prompts asking for a list of 1 to 12 items; replies up to
  200 tokens, so their lengths differ a lot from item to item.
- **tagging** (:func:`tagging`): a short system prompt and a ticket of about PP tokens
  (within ±40 %), replies up to 64 tokens.

``Workload.prompts(n, tokenize, seed)`` is deterministic for a seed; give each round its
own seed so that no path can replay a cached prompt (the tickets and lists differ, the S
system prompt stays the same, as in a real backlog).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Tokenize = Callable[[str], Sequence[int]]

SYSTEM = "You are a helpful assistant that labels customer support tickets."
#: The request after each ticket: a short reply that ends by itself, as a tagger's label.
REQUEST = "Summarize this support ticket in one short sentence."

#: Subjects of support tickets.
SUBJECTS = [
    "Cannot log in after the password reset",
    "Invoice shows the wrong VAT number",
    "App crashes when I open the camera",
    "Refund for a duplicate charge",
    "Printer offline since the firmware update",
    "Shipping label was never emailed",
    "Two-factor codes arrive late",
    "Export to CSV drops the last column",
    "Dark mode makes the charts unreadable",
    "Cancel my subscription, please",
    "Webhook retries flood our endpoint",
    "The mobile sync loses offline edits",
]
_SENTENCES = [
    "I have tried restarting the device twice and nothing changed.",
    "This started on Monday morning, right after the update was installed.",
    "Our whole team of twelve people is affected, not just my account.",
    "The error message says something about an expired session token.",
    "I attached a screenshot of the settings page to this ticket.",
    "Support chat told me to clear the cache, which did not help.",
    "We are on the business plan and pay yearly by bank transfer.",
    "It works in the browser but fails every time in the desktop app.",
    "Could you please look into it before the end of the week?",
    "The same problem happened last month and went away on its own.",
    "I am using the latest version on Windows 11 with a German keyboard.",
    "Our accountant needs the corrected document for the quarterly report.",
    "Nothing in the status page mentions an outage today.",
    "When I switch to another network the behaviour stays the same.",
    "I would rather not reinstall since it took hours to configure.",
    "Please reply by email, I rarely check the in-app messages.",
]


def chatml(system: str, user: str) -> str:
    """A ChatML prompt ending where the assistant's reply starts."""
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n"
        f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )


def _user(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def tagged(tag: str, n: int) -> list[str]:
    """``n`` short chat prompts that share nothing with another tag's past the chat header
    (the tag and the item's number come first), for paths that must not reuse each
    other's cached prompts."""
    return [_user(f"[{tag}-{k}] One line on: {SUBJECTS[k % len(SUBJECTS)]}.") for k in range(n)]


def warmup_prompt() -> str:
    """A short prompt for the untimed warm-up."""
    return chatml(SYSTEM, "Ticket #1: Printer offline.")


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


def _ticket(rng: random.Random, tokenize: Tokenize, target: int, wrap: Callable[[str], str]) -> str:
    """A ticket (a subject, then sentences of the pool, each once before any repeats)
    grown until ``wrap(ticket)`` has ``target`` tokens."""
    ticket = f"Ticket #{rng.randrange(10**6):06d}: {rng.choice(SUBJECTS)}."
    pool: list[str] = []
    while len(tokenize(wrap(ticket))) < target:
        if not pool:
            pool = rng.sample(_SENTENCES, len(_SENTENCES))
        ticket += " " + pool.pop()
    return wrap(ticket)


def _shared(n: int, tokenize: Tokenize, rng: random.Random) -> list[str]:
    system = system_prompt_s(tokenize)
    n_system = len(tokenize(chatml(system, "")))
    wrap = lambda t: chatml(system, t + "\n\nTag this ticket.")  # noqa: E731
    return [
        _ticket(rng, tokenize, rng.randint(n_system + 50, n_system + 150), wrap) for _ in range(n)
    ]


def _unique(n: int, tokenize: Tokenize, rng: random.Random) -> list[str]:
    wrap = lambda t: _user(f"{t}\n\n{REQUEST}")  # noqa: E731
    return [_ticket(rng, tokenize, rng.randint(150, 350), wrap) for _ in range(n)]


_THINGS = (
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


def _lists(n: int, tokenize: Tokenize, rng: random.Random) -> list[str]:
    return [
        _user(
            f"List {rng.randint(1, 12)} {rng.choice(_THINGS)}, one per line, numbered, "
            f"nothing else. (Request {rng.randrange(10**6):06d})"
        )
        for _ in range(n)
    ]


@dataclass(frozen=True, slots=True)
class Workload:
    """A named workload: how its prompts are made, and the reply cap.

    Attributes:
        name: "S", "U", "L" or "tagging".
        max_tokens: most reply tokens per item.
        description: one line for reports.
        make: ``make(n, tokenize, rng)``: ``n`` prompts drawn with ``rng``.
    """

    name: str
    max_tokens: int
    description: str
    make: Callable[[int, Tokenize, random.Random], list[str]]

    def prompts(self, n: int, tokenize: Tokenize, seed: int) -> list[str]:
        """``n`` prompts, deterministic for ``seed`` (lengths counted by ``tokenize``)."""
        return self.make(n, tokenize, random.Random(f"{self.name}/{seed}"))


def tagging(prompt_tokens: int, spread: float = 0.4) -> Workload:
    """The tagging workload: :data:`SYSTEM`, then a ticket and :data:`REQUEST`, each
    prompt of about ``prompt_tokens * U(1 - spread, 1 + spread)`` tokens."""

    def make(n: int, tokenize: Tokenize, rng: random.Random) -> list[str]:
        wrap = lambda t: chatml(SYSTEM, f"{t}\n\n{REQUEST}")  # noqa: E731
        return [
            _ticket(rng, tokenize, round(prompt_tokens * rng.uniform(1 - spread, 1 + spread)), wrap)
            for _ in range(n)
        ]

    what = f"ChatML tagging prompts of about {prompt_tokens} tokens"
    return Workload("tagging", 64, f"{what}, replies up to 64 tokens", make)


#: The named workloads.
WORKLOADS: dict[str, Workload] = {
    "S": Workload(
        "S",
        48,
        "~390-token system prompt shared by every item + a 50-150 "
        "token ticket, replies up to 48 tokens",
        _shared,
    ),
    "U": Workload("U", 48, "unique prompts of 150-350 tokens, replies up to 48 tokens", _unique),
    "L": Workload(
        "L", 200, "prompts asking for lists of 1 to 12 items, replies up to 200 tokens", _lists
    ),
}
