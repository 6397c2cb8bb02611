"""The product catalogue and goal set, loaded once per process and shared by every env.

The shipped file (``data/catalog.json.gz``) is produced by ``scripts/generate_catalog.py``; a
custom one (``catalog_path`` in the env config) has the same format. Loading is lazy (the first
env that needs it) and guarded by a lock, so many envs on many threads read one immutable copy.
"""

from __future__ import annotations

import gzip
import json
import threading
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

DEFAULT_CATALOG = "data/catalog.json.gz"
SUPPORTED_FORMATS = (1,)
#: every ``TEST_EVERY``-th goal is held out as the ``test`` split (the rest is ``train``)
TEST_EVERY = 10


@dataclass(frozen=True, slots=True)
class Product:
    """One item of the shop."""

    id: str
    title: str
    category: tuple[str, ...]  # (category, department, product type)
    type: str
    type_nouns: tuple[str, ...]  # the nouns of the product name that WebShop's type match compares
    brand: str
    price: float
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]]  # option name -> values offered, in display order
    description: str
    features: tuple[str, ...]

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Product:
        return cls(
            id=raw["id"], title=raw["title"], category=tuple(raw["category"]), type=raw["type"],
            type_nouns=tuple(raw["type_nouns"]), brand=raw["brand"], price=float(raw["price"]),
            attributes=tuple(raw["attributes"]),
            options={name: tuple(values) for name, values in raw["options"].items()},
            description=raw["description"], features=tuple(raw["features"]),
        )

    def option_of(self, value: str) -> str | None:
        """The option name a value belongs to (values are unique within a product)."""
        return next((name for name, values in self.options.items() if value in values), None)


@dataclass(frozen=True, slots=True)
class Goal:
    """What one instruction asks for; ``target`` is the product it was derived from."""

    index: int
    instruction: str
    target: Product
    attributes: tuple[str, ...]
    options: dict[str, str]  # option name -> wanted value
    price_upper: float

    @property
    def request(self) -> str:
        """The instruction without its price clause (what a shopper would type into search)."""
        return self.instruction.split(", and price lower than")[0]


@dataclass
class Catalog:
    """Products and goals of one catalogue file, plus its lazily built search index."""

    source: str
    products: tuple[Product, ...]
    goals: tuple[Goal, ...]
    by_id: dict[str, Product] = field(repr=False)
    _engine: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str) -> Catalog:
        if raw.get("format") not in SUPPORTED_FORMATS:
            raise ValueError(f"{source}: catalogue format {raw.get('format')!r} is not one of {SUPPORTED_FORMATS}")
        products = tuple(Product.from_dict(p) for p in raw["products"])
        by_id = {p.id: p for p in products}
        if len(by_id) != len(products):
            raise ValueError(f"{source}: product ids are not unique")
        goals = []
        for index, g in enumerate(raw["goals"]):
            if g["product"] not in by_id:
                raise ValueError(f"{source}: goal {index} names unknown product {g['product']!r}")
            goals.append(Goal(index=index, instruction=g["instruction"], target=by_id[g["product"]],
                              attributes=tuple(g["attributes"]), options=dict(g["options"]),
                              price_upper=float(g["price_upper"])))
        return cls(source=source, products=products, goals=tuple(goals), by_id=by_id)

    def split(self, name: str) -> tuple[Goal, ...]:
        """Goals of a split: ``all``, ``train`` or ``test`` (every ``TEST_EVERY``-th goal)."""
        keep = {
            "all": lambda g: True,
            "train": lambda g: g.index % TEST_EVERY != 0,
            "test": lambda g: g.index % TEST_EVERY == 0,
        }[name]
        return tuple(g for g in self.goals if keep(g))

    def search_engine(self):
        """The BM25 engine over this catalogue, built on first use and shared by every env."""
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    from roll_env_webshop.search import SearchEngine

                    self._engine = SearchEngine(self.products)
        return self._engine


_catalogs: dict[str, Catalog] = {}
_catalogs_lock = threading.Lock()


def read_catalog_bytes(path: str | Path | None = None) -> bytes:
    """The uncompressed JSON bytes of a catalogue file (the shipped one by default)."""
    if path is None:
        data = resources.files("roll_env_webshop").joinpath(DEFAULT_CATALOG).read_bytes()
        source = DEFAULT_CATALOG
    else:
        data, source = Path(path).read_bytes(), str(path)
    return gzip.decompress(data) if source.endswith(".gz") else data


def load_catalog(path: str | Path | None = None) -> Catalog:
    """The catalogue at ``path`` (default: the shipped one), parsed once per process."""
    key = str(Path(path).resolve()) if path is not None else DEFAULT_CATALOG
    with _catalogs_lock:
        catalog = _catalogs.get(key)
        if catalog is None:
            catalog = _catalogs[key] = Catalog.from_dict(json.loads(read_catalog_bytes(path)), key)
        return catalog
