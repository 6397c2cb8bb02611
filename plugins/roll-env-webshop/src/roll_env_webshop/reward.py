"""WebShop's purchase score (Yao et al., 2022, section 3.2).

    r = r_type * (|U_att ∩ Y_att| + |U_opt ∩ Y_opt| + 1[y_price <= u_price]) / (|U_att| + |U_opt| + 1)

U is the goal (wanted attributes, option values and price ceiling), Y the bought product with the
options selected at purchase. ``r_type`` follows the paper's type-match rules: the purchase is of
the right type when its search query (here: product type) matches, or at least two category levels
match, or more than 20% of the goal's product-name nouns appear in the bought product's; otherwise
``r_type`` is 0.5, and it drops to 0.1 below 10% noun overlap and to 0 with none. The catalogue is
synthetic, so attribute and option values are compared exactly (WebShop needs fuzzy matching for
scraped text) and product-name nouns are stored with each product instead of found by a tagger.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from roll_env_webshop.catalog import Goal, Product


@dataclass(frozen=True)
class PurchaseScore:
    """The score of one purchase and its parts (reported in the step ``info``)."""

    score: float
    r_type: float
    r_att: float  # fraction of wanted attributes the product has
    r_option: float  # fraction of wanted option values selected
    r_price: float  # 1 when the price is within the ceiling
    query_match: bool
    category_match: bool
    title_score: float

    def to_dict(self) -> dict[str, float | bool]:
        return asdict(self)


def type_reward(wanted: Product, bought: Product) -> tuple[float, bool, bool, float]:
    """(r_type, query_match, category_match, title_score) of buying ``bought`` for ``wanted``."""
    query_match = bought.type == wanted.type
    category_match = len(set(bought.category) & set(wanted.category)) >= 2
    desired = set(wanted.type_nouns)
    title_score = len(desired & set(bought.type_nouns)) / len(desired) if desired else 0.2
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, title_score


def score_purchase(goal: Goal, product: Product, selected: Mapping[str, str]) -> PurchaseScore:
    """Score buying ``product`` with the ``selected`` options (name -> value) against ``goal``."""
    r_type, query_match, category_match, title_score = type_reward(goal.target, product)
    n_att = sum(a in product.attributes for a in goal.attributes)
    chosen = set(selected.values())
    n_opt = sum(v in chosen for v in goal.options.values())
    r_price = float(product.price <= goal.price_upper)
    total = len(goal.attributes) + len(goal.options) + 1
    return PurchaseScore(
        score=r_type * (n_att + n_opt + r_price) / total,
        r_type=r_type,
        r_att=n_att / len(goal.attributes) if goal.attributes else 1.0,
        r_option=n_opt / len(goal.options) if goal.options else 1.0,
        r_price=r_price,
        query_match=query_match,
        category_match=category_match,
        title_score=title_score,
    )
