"""A tiny seeded prose engine: a vocabulary, sentence templates and a filler.

Every word comes from `Prose.rng` (a `random.Random`), so the same seed writes the same
text. The templates mix topic nouns, general vocabulary, names and numbers, which is
enough variety that two generated paragraphs rarely share more than a few words in a
row: deduplication and compression of the workload have real work to do.
"""

from __future__ import annotations

import random
import re
from string import Formatter

GENERAL_NOUNS = (
    "approach budget pilot rollout baseline survey forecast backlog review dataset pipeline "
    "vendor contract region segment margin metric target threshold estimate benchmark audit "
    "programme framework incentive workforce partner milestone schedule roadmap proposal "
    "assessment deployment capacity demand supply share trend outlook scenario constraint "
    "bottleneck shortfall surplus upgrade retrofit standard regulation tariff subsidy grant"
).split()
ADJECTIVES = (
    "modest steady sharp notable uneven gradual significant marginal robust fragile regional "
    "national early late preliminary revised updated quarterly annual independent internal "
    "external comparable sustained temporary structural seasonal unexpected consistent "
    "measurable cautious ambitious conservative aggressive mixed narrow broad"
).split()
VERBS_PAST = (
    "reported recorded measured estimated projected outlined confirmed questioned revised "
    "doubled halved tracked flagged highlighted attributed linked compared reviewed "
    "published documented observed announced expanded reduced delayed accelerated"
).split()
VERBS_PRESENT = (
    "suggests indicates shows implies reflects explains limits drives offsets supports "
    "complicates accelerates constrains reinforces undermines shapes affects"
).split()
ADVERBS = (
    "broadly largely partly sharply slightly steadily notably roughly consistently "
    "temporarily increasingly mostly"
).split()
CONNECTORS = (
    "However,|In practice,|By contrast,|At the same time,|For now,|Meanwhile,|Even so,|"
    "In the short term,|Over the longer run,|Crucially,|On balance,|In several cases,"
).split("|")
ORGS = (
    "Nordvik Energy|Halden Institute|Brightwater Analytics|Cascade Labs|Meridian Group|"
    "Oakridge Research|Tessellate Partners|Polaris Advisory|Kestrel Systems|Lumen Policy Centre|"
    "Arbor & Finch|Solent Data Works|Vireo Foundation|Granite Peak Capital|Fjordline Consulting|"
    "Quarry Street Research|Bluefield Observatory|Sable Metrics"
).split("|")
PLACES = (
    "Rotterdam|Lyon|Ohio|Bavaria|Ontario|Kyushu|Catalonia|Victoria|Oslo|Texas|Gdansk|"
    "Porto|Minnesota|Leeds|Quebec|Lombardy|Jutland|Oregon"
).split("|")
FIRST_NAMES = (
    "Priya Mateo Hannah Jonas Aiko Samir Elena Tomasz Grace Diego Ingrid Kwame Lena Omar "
    "Sofia Felix Mei Rafael Anika Bruno Chloe Dmitri Yara Luca"
).split()
LAST_NAMES = (
    "Raman Alvarez Kowalski Lindqvist Okafor Tanaka Brennan Haddad Moreau Castillo Novak "
    "Fischer Osei Larsen Vance Mbeki Rossi Sato Dubois Keller"
).split()

SENTENCES = (
    "{N} {V} a {A} increase in {n} of {P} between {Y} and {Y2}.",
    "According to {ORG}, the {A} {n} {Vp} that {N} will remain the main {g} through {Y2}.",
    "{C} the {g} for {n} {Vp} a {A} {g2} rather than a lasting shift.",
    "In {PL}, operators {V} {NUM} of {n} capacity, {Adv} ahead of the {A} {g}.",
    "{PER} of {ORG} {V} that {n} costs fell {P} once the {g} was in place.",
    "The {A} {g} for {n} {Vp} how quickly the {N2} can scale beyond {PL}.",
    "{C} most {n} projects still depend on a {A} {g} and a {A2} {g2}.",
    "A {A} {g} covering {NUMI} sites {V} {n} efficiency near {P}, {Adv} in line with the {Y} data.",
    "{N} remains {Adv} {A} in {PL}, where the {g} is set every {NUMI} months.",
    "Analysts at {ORG} {V} the {n} {g} at {NUM}, up from {NUM2} a year earlier.",
    "{C} the {Y} {g} treats {n} and {n2} as separate line items.",
    "Without a {A} {g}, {n} adoption {Vp} the {A2} {g2} that {ORG} {V} in {Y}.",
    "Early results from {PL} show {n} {Adv} outperforming the {g} by {P}.",
    "{PER} argues that the {n} {g} {Vp} a {A} trade-off between cost and {n2}.",
    "The {g} assumes {NUM} of {n} per year, which {Vp} the {A} {g2} in {PL}.",
    "Roughly {P} of respondents {V} delays linked to {n2}, versus {P2} in {Y}.",
)


def _compile(template: str) -> tuple[tuple[str, str | None], ...]:
    return tuple((lit, field) for lit, field, _, _ in Formatter().parse(template))


_COMPILED = tuple(_compile(t) for t in SENTENCES)
_AN = re.compile(r"\b([Aa]) ([aeiou])")


class Prose:
    """Seeded text: sentences, paragraphs, titles, names and numbers about a set of topic nouns."""

    def __init__(self, rng: random.Random, nouns: tuple[str, ...] | list[str] = ()) -> None:
        self.rng = rng
        self.nouns = tuple(nouns) or tuple(GENERAL_NOUNS)

    def with_nouns(self, nouns: tuple[str, ...] | list[str]) -> Prose:
        return Prose(self.rng, nouns)

    # small pieces -------------------------------------------------------------
    def person(self) -> str:
        return f"{self.rng.choice(FIRST_NAMES)} {self.rng.choice(LAST_NAMES)}"

    def pct(self) -> str:
        return f"{self.rng.randint(2, 68)}.{self.rng.randint(0, 9)}%"

    def num(self) -> str:
        r = self.rng
        return r.choice(("{:,} t", "{:,} MWh", "{:,} units", "${:,}k", "{:,} km", "{:,} GWh")).format(
            r.randint(12, 9800)
        )

    def _slot(self, name: str) -> str:
        r = self.rng
        base = name.rstrip("2")
        if base == "N":
            n = r.choice(self.nouns)
            return n[0].upper() + n[1:]
        if base == "n":
            return r.choice(self.nouns)
        if base == "g":
            return r.choice(GENERAL_NOUNS)
        if base == "A":
            return r.choice(ADJECTIVES)
        if base == "V":
            return r.choice(VERBS_PAST)
        if base == "Vp":
            return r.choice(VERBS_PRESENT)
        if base == "Adv":
            return r.choice(ADVERBS)
        if base == "C":
            return r.choice(CONNECTORS)
        if base == "P":
            return self.pct()
        if base == "Y":
            return str(r.randint(2016, 2026))
        if base == "ORG":
            return r.choice(ORGS)
        if base == "PL":
            return r.choice(PLACES)
        if base == "PER":
            return self.person()
        if base == "NUM":
            return self.num()
        if base == "NUMI":
            return str(r.randint(3, 48))
        raise KeyError(name)

    def sentence(self) -> str:
        parts: list[str] = []
        for lit, field in self.rng.choice(_COMPILED):
            parts.append(lit)
            if field:
                parts.append(self._slot(field))
        text = _AN.sub(r"\1n \2", "".join(parts))
        return text[0].upper() + text[1:]

    def paragraph(self, lo: int = 3, hi: int = 7) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(lo, hi)))

    def title(self) -> str:
        r = self.rng
        n = r.choice(self.nouns)
        return r.choice(
            (
                f"What the {r.choice(ADJECTIVES)} {n} numbers really say",
                f"{n.capitalize()} in {r.choice(PLACES)}: a {r.choice(ADJECTIVES)} {r.choice(GENERAL_NOUNS)}",
                f"Why {n} {r.choice(VERBS_PRESENT)} the next {r.choice(GENERAL_NOUNS)}",
                f"The {r.choice(GENERAL_NOUNS)} behind {r.randint(2019, 2026)}'s {n} boom",
                f"{r.choice(ORGS)} on {n}: {r.choice(ADJECTIVES)} gains, open questions",
            )
        )

    def phrase(self) -> str:
        """A short noun phrase, for headings, list items and table cells."""
        r = self.rng
        return f"{r.choice(ADJECTIVES)} {r.choice(self.nouns)} {r.choice(GENERAL_NOUNS)}"

    def words(self, n: int) -> str:
        r = self.rng
        pool = self.nouns + tuple(GENERAL_NOUNS[:20]) + tuple(ADJECTIVES[:20])
        return " ".join(r.choice(pool) for _ in range(n))
