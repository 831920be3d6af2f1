"""A deterministic, English-like training corpus: paragraphs from a seeded stochastic grammar.

    text = generate(4_000_000, seed=0)    # bytes, exactly 4e6 of them, ASCII

Sentences are noun phrases and verb phrases with number agreement ("the small dogs carry a
red box near the river."), time and place openers, clauses joined by "and"/"but", questions
and quoted speech, three to six sentences a paragraph, one paragraph a line. A byte-level model
learns its spelling, its word order and its agreement, so the loss falls well below the
ln(256) = 5.55 nats of uniform bytes.

Same bytes for a seed on every machine: every choice is drawn from NumPy's PCG64 bit generator
through ``random_raw`` (its raw 64-bit stream, which NumPy keeps stable across versions and
platforms, unlike ``Generator``'s methods) as ``raw % len(options)``.
"""
from __future__ import annotations

import numpy as np

#: Raw 64-bit draws fetched from the bit generator at a time.
CHUNK = 1 << 16

NOUNS = [("dog", "dogs"), ("cat", "cats"), ("child", "children"), ("teacher", "teachers"),
         ("farmer", "farmers"), ("bird", "birds"), ("box", "boxes"), ("letter", "letters"),
         ("river", "rivers"), ("city", "cities"), ("garden", "gardens"), ("machine", "machines"),
         ("story", "stories"), ("window", "windows"), ("friend", "friends"), ("horse", "horses"),
         ("woman", "women"), ("man", "men"), ("book", "books"), ("road", "roads")]
NAMES = ["Anna", "Ben", "Clara", "David", "Elena", "Frank", "Grace", "Henry", "Ivy", "Jonas"]
ADJECTIVES = ["small", "old", "red", "quiet", "happy", "tall", "green", "strange", "bright",
              "heavy", "young", "careful", "empty", "warm"]
#: Transitive verbs, (plural/base form, third person singular).
TRANSITIVE = [("see", "sees"), ("carry", "carries"), ("watch", "watches"), ("follow", "follows"),
              ("help", "helps"), ("build", "builds"), ("paint", "paints"), ("open", "opens"),
              ("find", "finds"), ("push", "pushes"), ("read", "reads"), ("like", "likes")]
INTRANSITIVE = [("sleep", "sleeps"), ("run", "runs"), ("laugh", "laughs"), ("wait", "waits"),
                ("sing", "sings"), ("work", "works"), ("rest", "rests"), ("arrive", "arrives")]
ADVERBS = ["quickly", "slowly", "again", "today", "quietly", "often", "together", "outside"]
PREPOSITIONS = ["near", "behind", "under", "beside", "across", "inside", "above"]
OPENERS = ["Yesterday", "In the morning", "After the rain", "Every day", "At night", "Later",
           "In the city", "Near the river"]
CONJUNCTIONS = ["and", "but", "so", "while"]
SPEECH = ["said", "asked", "shouted", "whispered"]


class _Draws:
    """Uniform choices from PCG64's raw stream."""

    def __init__(self, seed: int):
        self._bits = np.random.PCG64(seed)
        self._buffer: list[int] = []

    def index(self, n: int) -> int:
        """An integer in [0, n) (modulo bias < n / 2**64)."""
        if not self._buffer:
            self._buffer = self._bits.random_raw(CHUNK).tolist()[::-1]
        return self._buffer.pop() % n

    def pick(self, options):
        return options[self.index(len(options))]

    def chance(self, numerator: int, denominator: int) -> bool:
        return self.index(denominator) < numerator


def _noun_phrase(draws: _Draws) -> tuple[str, bool]:
    """(words, plural)."""
    kind = draws.index(5)
    if kind == 0:
        return draws.pick(NAMES), False
    plural = draws.chance(1, 2)
    noun = draws.pick(NOUNS)[plural]
    determiner = draws.pick(["the", "some", "two", "many"] if plural else ["the", "a", "one", "every"])
    words = [determiner]
    if draws.chance(1, 2):
        words.append(draws.pick(ADJECTIVES))
    words.append(noun)
    if kind == 1:
        words += [draws.pick(PREPOSITIONS), "the", draws.pick(NOUNS)[0]]
    return " ".join(words), plural


def _verb_phrase(draws: _Draws, plural: bool, base: bool = False) -> str:
    """A verb phrase agreeing with a subject; ``base``: the bare form (after "do"/"does")."""
    form = 0 if plural or base else 1
    kind = draws.index(4)
    if kind <= 1:
        return f"{draws.pick(TRANSITIVE)[form]} {_noun_phrase(draws)[0]}"
    if kind == 2:
        return f"{draws.pick(INTRANSITIVE)[form]} {draws.pick(ADVERBS)}"
    copula = "be" if base else ("are" if plural else "is")
    return f"{copula} {draws.pick(ADJECTIVES)}"


def _clause(draws: _Draws) -> str:
    subject, plural = _noun_phrase(draws)
    return f"{subject} {_verb_phrase(draws, plural)}"


def _capitalized(text: str) -> str:
    return text[0].upper() + text[1:]


def _sentence(draws: _Draws) -> str:
    kind = draws.index(6)
    if kind == 0:
        text = f"{draws.pick(OPENERS)}, {_clause(draws)}."
    elif kind == 1:
        text = f"{_clause(draws)}, {draws.pick(CONJUNCTIONS)} {_clause(draws)}."
    elif kind == 2:
        subject, plural = _noun_phrase(draws)
        text = f"{'do' if plural else 'does'} {subject} {_verb_phrase(draws, plural, base=True)}?"
    elif kind == 3:
        return f'"{_capitalized(_clause(draws))}," {draws.pick(SPEECH)} {draws.pick(NAMES)}.'
    else:
        text = f"{_clause(draws)}."
    return _capitalized(text)


def generate(n_bytes: int, seed: int = 0) -> bytes:
    """``n_bytes`` ASCII bytes of grammar text (the last paragraph cut off), the same for a seed."""
    draws = _Draws(seed)
    paragraphs, size = [], 0
    while size < n_bytes:
        paragraph = " ".join(_sentence(draws) for _ in range(3 + draws.index(4))) + "\n"
        paragraphs.append(paragraph)
        size += len(paragraph)
    return "".join(paragraphs).encode("ascii")[:n_bytes]
