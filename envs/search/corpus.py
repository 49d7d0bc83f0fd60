"""A synthetic encyclopedia of invented countries, so search envs need no download.

Every fact is its own short document ("The capital of Zorland is Vexa."), and the names are
made up, so a model cannot answer from memory: it has to search. One-hop questions ask for a
fact of a named country; two-hop questions name the country only through another fact ("the
country whose capital is Vexa"), so the agent must search twice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "th", "qu"]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ou"]
_CODAS = ["", "", "n", "r", "l", "s", "x", "sh"]

# attribute: (fact template, question template, phrase naming a country by it)
ATTRIBUTES: dict[str, tuple[str, str, str]] = {
    "capital": (
        "The capital of {c} is {v}.",
        "What is the capital of {c}?",
        "the country whose capital is {v}",
    ),
    "currency": (
        "The currency of {c} is the {v}.",
        "What is the currency of {c}?",
        "the country whose currency is the {v}",
    ),
    "river": (
        "The longest river in {c} is the {v}.",
        "What is the longest river in {c}?",
        "the country whose longest river is the {v}",
    ),
    "founder": (
        "{c} was founded by {v}.",
        "Who founded {c}?",
        "the country founded by {v}",
    ),
}


@dataclass
class Question:
    question: str
    answer: str
    queries: list[str]
    """What the oracle searches for, hop by hop."""


def _word(rng: np.random.Generator, syllables: int) -> str:
    parts = [
        str(rng.choice(_ONSETS)) + str(rng.choice(_VOWELS)) + str(rng.choice(_CODAS))
        for _ in range(syllables)
    ]
    return "".join(parts).capitalize()


class Corpus:
    """`n_countries` invented countries with one unique value per attribute."""

    def __init__(self, n_countries: int = 30, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        used: set[str] = set()

        def fresh(syllables: int) -> str:
            while True:
                w = _word(rng, syllables)
                if w not in used:
                    used.add(w)
                    return w

        self.facts: dict[str, dict[str, str]] = {}
        for _ in range(n_countries):
            country = fresh(2) + str(rng.choice(["land", "ia", "stan", "mark"]))
            self.facts[country] = {
                "capital": fresh(2),
                "currency": fresh(1).lower(),
                "river": fresh(2),
                "founder": f"{fresh(2)} {fresh(2)}",
            }
        self.docs = [
            {"id": f"{c}/{attr}", "title": c, "text": ATTRIBUTES[attr][0].format(c=c, v=v)}
            for c, attrs in self.facts.items()
            for attr, v in attrs.items()
        ]

    def question(self, rng: np.random.Generator, hops: int = 1) -> Question:
        countries = list(self.facts)
        c = countries[int(rng.integers(len(countries)))]
        attr = str(rng.choice(list(ATTRIBUTES)))
        answer = self.facts[c][attr]
        if hops == 1:
            q = ATTRIBUTES[attr][1].format(c=c)
            return Question(q, answer, [q])
        if hops != 2:
            raise ValueError(f"hops must be 1 or 2, got {hops}")
        bridge = str(rng.choice([a for a in ATTRIBUTES if a != attr]))
        phrase = ATTRIBUTES[bridge][2].format(v=self.facts[c][bridge])
        q = ATTRIBUTES[attr][1].format(c=phrase)
        return Question(q, answer, [phrase, ATTRIBUTES[attr][1].format(c=c)])
