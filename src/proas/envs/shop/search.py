"""BM25 product search configured like WebShop's Lucene index (pyserini defaults).

WebShop indexes, per product, ``lower(Title + ' ' + Description + ' ' + BulletPoints[0] + ' ' +
option_text)`` where ``option_text = ', and '.join('name: v1, v2')``, and asks Lucene for the top 50
with BM25 (k1 0.9, b 0.4) under Anserini's default English analyzer (lower-case, Lucene's English
stop words, Porter stemming). Here: ``bm25s`` with ``method='lucene'``, the same k1/b, a
tokenizer after Unicode word breaks like Lucene's (one-character tokens, "6.5", "1,299" and
"l'eau" kept), possessive 's removed, Lucene's 33 English stop words and the original Porter
stemmer from PyStemmer. Only documents that contain a query term are hits, in
score order, ties broken by document order (as newer Anserini does). Lucene's lossy length norm is
not reproduced, so rankings can differ in small ways from WebShop's.

Indexes are cached in memory by a key of the catalog, so building one costs once per process.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Mapping, Sequence

import bm25s
import numpy as np
import Stemmer

#: Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET
LUCENE_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)
SEARCH_RETURN_N = 50
K1, B = 0.9, 0.4

# Lucene's StandardTokenizer follows Unicode word breaks (UAX#29): letters and digits run together,
# and a run continues over '.', ':' or an apostrophe between two letters ("l'eau", "u.s.a") and
# over '.', ',', ';' or an apostrophe between two digits ("6.5", "1,299.00")
_TOKEN = re.compile(r"[^\W_]+(?:(?:(?<=[^\W\d_])[.:'’](?=[^\W\d_])|(?<=\d)[.,;'’](?=\d))[^\W_]+)*")


class Analyzer:
    """Lower-case, tokenize, drop stop words and possessive 's, Porter-stem (cached per word)."""

    def __init__(self) -> None:
        self._stemmer = Stemmer.Stemmer("porter")
        self._cache: dict[str, str] = {}

    def __call__(self, text: str) -> list[str]:
        out = []
        for tok in _TOKEN.findall(text.lower()):
            if tok.endswith(("'s", "’s")):
                tok = tok[:-2]
            if not tok or tok in LUCENE_STOP_WORDS:
                continue
            stem = self._cache.get(tok)
            if stem is None:
                stem = self._cache[tok] = self._stemmer.stemWord(tok)
            out.append(stem)
        return out


def document_text(product: Mapping[str, Any]) -> str:
    """The text WebShop's ``convert_product_file_format.py`` indexes for one product."""
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product["options"].items())
    bullets = product["BulletPoints"]
    first_bullet = bullets[0] if bullets else ""
    return " ".join([product["Title"], product["Description"], first_bullet, option_text]).lower()


class SearchIndex:
    """BM25 over a product list; ``search(keywords)`` returns up to 50 product indices."""

    def __init__(self, products: Sequence[Mapping[str, Any]]) -> None:
        self.analyzer = Analyzer()
        vocab: dict[str, int] = {}
        corpus_ids = []
        for p in products:
            corpus_ids.append([vocab.setdefault(t, len(vocab)) for t in self.analyzer(document_text(p))])
        self.vocab = vocab
        self.size = len(products)
        self._bm25 = bm25s.BM25(k1=K1, b=B, method="lucene")
        self._bm25.index((corpus_ids, vocab), show_progress=False)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Indices of the top ``k`` products containing a query term, best first."""
        ids = [self.vocab[t] for t in self.analyzer(query) if t in self.vocab]
        if not ids:
            return []
        scores = self._bm25.get_scores_from_ids(ids)
        hits = np.flatnonzero(scores > 0)
        # stable sort on -score keeps document order among equal scores
        order = hits[np.argsort(-scores[hits], kind="stable")]
        return order[:k].tolist()


_CACHE: dict[Any, SearchIndex] = {}
_LOCK = threading.Lock()


def cached_index(key: Any, products: Sequence[Mapping[str, Any]]) -> SearchIndex:
    """The index of ``products``, built once per ``key`` in this process."""
    with _LOCK:
        index = _CACHE.get(key)
        if index is None:
            index = _CACHE[key] = SearchIndex(products)
        return index
