"""Title nouns for WebShop's type reward.

WebShop tags the purchased and the target product names with spaCy (``en_core_web_sm``) and keeps
tokens tagged NOUN or PROPN. That model is not on PyPI, so proas picks a source:

- ``"spacy"``: spaCy with ``en_core_web_sm`` (error if it cannot be loaded) — WebShop's behaviour;
- ``"stored"``: the catalog's stored nouns (the ``title_nouns`` key of proas's synthetic products),
  and for a title the catalog does not know, a documented heuristic: its alphabetic words of two or
  more letters that are not function words or common product adjectives;
- ``"auto"`` (default): ``"spacy"`` when the model loads, otherwise ``"stored"``.

The choice changes rewards only for products of different types: buying the target itself always
scores ``title_score = 1``.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any, Mapping

from proas.errors import ProasError

NOUN_SOURCES = ("auto", "spacy", "stored")

_WORD = re.compile(r"[a-z0-9]+")
# function words and frequent product adjectives that a tagger would not call nouns
_NOT_NOUNS = frozenset(
    """a an and are as at be but by for from if in into is it its no not of on or such that the their then there
    these they this to was will with without you your our my me i we he she him her his
    new best premium classic modern original pro ultra max mini plus lite extra super large small medium big
    soft hard light dark long short high low slim thin thick wide narrow compact portable wireless daily
    natural organic pure fresh gentle radiant luxe essential casual everyday athletic rustic industrial
    scandinavian farmhouse minimalist artisan gourmet select family size deluxe adjustable ergonomic silent
    protective fast flat round metal wooden matte liquid satin moisturizing hydrating clarifying flavored
    sparkling roasted mixed dry ground green red blue black white pink gray grey brown""".split()
)

# "women's" / "men's" name the buyer, not the product type; kept, they make any two products for
# one gender share a title noun and earn a type reward where WebShop's is 0. Plain "women"
# ("perfume for women") stays a noun.
_NOT_NOUN_POSSESSIVES = re.compile(r"\b(?:women|men)['’]s\b")


def heuristic_nouns(title: str) -> list[str]:
    """A tagger-free approximation of spaCy's NOUN/PROPN tokens of a product title."""
    words = _WORD.findall(_NOT_NOUN_POSSESSIVES.sub(" ", title.lower()))
    return [w for w in words if len(w) >= 2 and not w.isdigit() and w not in _NOT_NOUNS]


def _load_spacy() -> Any | None:
    # importing spaCy costs seconds; look for the model package first
    if importlib.util.find_spec("en_core_web_sm") is None:
        return None
    try:
        import spacy  # noqa: PLC0415

        return spacy.load("en_core_web_sm")
    except Exception:  # ImportError, OSError (model missing), version clashes
        return None


class TitleNouns:
    """``nouns(title) -> list[str]`` (lower-cased), cached per title."""

    def __init__(self, source: str = "auto", stored: Mapping[str, list[str]] | None = None) -> None:
        if source not in NOUN_SOURCES:
            raise ProasError(f"unknown title-noun source {source!r}; choose one of {list(NOUN_SOURCES)}")
        self._nlp = None
        if source in ("auto", "spacy"):
            self._nlp = _load_spacy()
            if self._nlp is None and source == "spacy":
                raise ProasError("title-noun source 'spacy' needs spaCy with the en_core_web_sm model installed")
        self.source = "spacy" if self._nlp is not None else "stored"
        self._stored = dict(stored or {})
        self._cache: dict[str, list[str]] = {}

    def __call__(self, title: str) -> list[str]:
        out = self._cache.get(title)
        if out is None:
            if self._nlp is not None:
                out = [t.text.lower() for t in self._nlp(title) if t.pos_ in ("NOUN", "PROPN")]
            elif title in self._stored:
                out = [n.lower() for n in self._stored[title]]
            else:
                out = heuristic_nouns(title)
            self._cache[title] = out
        return out
