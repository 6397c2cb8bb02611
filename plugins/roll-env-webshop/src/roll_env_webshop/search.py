"""BM25 search over product titles and attributes (the bm25s library, numpy backend).

One :class:`SearchEngine` is built per catalogue and process (see ``Catalog.search_engine``); after
construction it is read-only, so envs on any thread query it concurrently. Rankings are
deterministic: ties in score are broken by catalogue order, not by the library's top-k selection.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import bm25s
import numpy as np

from roll_env_webshop.catalog import Product

_TOKEN = re.compile(r"[a-z0-9]+(?:\.[0-9]+)*")
#: words of shopping requests that never discriminate between products
STOPWORDS = frozenset(
    "a an the and or of to in on with for that is are be it its this i i'm im am me my need want "
    "looking buy find please shopping price lower than under less dollars dollar some".split()
)


def _stem(token: str) -> str:
    """Drop a plural ``s`` so that ``shoe`` finds ``shoes`` (and ``dress``/``glass`` stay intact)."""
    return token[:-1] if len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us")) else token


def tokenize(text: str) -> list[str]:
    """Lower-cased word and number tokens, stop words removed, plurals folded."""
    text = text.lower().replace("'s ", " ").replace("\u2019s ", " ")
    return [_stem(t) for t in _TOKEN.findall(text) if t not in STOPWORDS]


def document_text(product: Product) -> str:
    """What the index sees of a product: its title and its attributes."""
    return " ".join([product.title, *product.attributes])


class SearchEngine:
    """Ranks products for a free-text query with BM25 (Lucene variant, k1=1.5, b=0.75)."""

    def __init__(self, products: Sequence[Product]):
        self.products = tuple(products)
        self._bm25 = bm25s.BM25(method="lucene", backend="numpy", csc_backend="numpy")
        self._bm25.index([tokenize(document_text(p)) for p in self.products], show_progress=False)

    def search(self, query: str, limit: int) -> list[Product]:
        """The best ``limit`` products with a positive score, best first."""
        ids = self._bm25.get_tokens_ids(tokenize(query))
        if not ids:
            return []
        scores = np.asarray(self._bm25.get_scores_from_ids(ids), dtype=np.float64)
        order = np.lexsort((np.arange(len(scores)), -scores))[:limit]
        return [self.products[i] for i in order if scores[i] > 0]
