"""WebShop's reward formula on hand-built products with hand-computed scores."""

from __future__ import annotations

import pytest
from roll_env_webshop.catalog import Goal, Product
from roll_env_webshop.reward import score_purchase, type_reward


def product(pid="b0test0001", *, type="t-shirt", category=("clothing", "men", "t-shirt"), nouns=("men", "t", "shirt"),
            price=20.0, attributes=("cotton", "slim fit", "machine washable"),
            options=None) -> Product:
    return Product(id=pid, title=f"Test {type}", category=category, type=type, type_nouns=nouns, brand="Test",
                   price=price, attributes=attributes,
                   options=options if options is not None else {"size": ("small", "large"), "color": ("red", "blue")},
                   description="", features=())


def goal(target=None, *, attributes=("cotton", "slim fit"), options=None, price_upper=25.0) -> Goal:
    return Goal(index=0, instruction="test", target=target or product(), attributes=attributes,
                options=options if options is not None else {"size": "large", "color": "red"},
                price_upper=price_upper)


def test_perfect_purchase_scores_exactly_one():
    result = score_purchase(goal(), product(), {"size": "large", "color": "red"})
    assert result.score == 1.0 and result.r_type == 1.0 and result.query_match


@pytest.mark.parametrize("bought, selected, expected", [
    # 2 attrs + 2 options + price = 5 parts
    (product(), {"size": "large"}, 4 / 5),                                     # one option missing
    (product(), {}, 3 / 5),                                                    # no options selected
    (product(), {"size": "small", "color": "blue"}, 3 / 5),                    # wrong options
    (product(price=30.0), {"size": "large", "color": "red"}, 4 / 5),           # over the price ceiling
    (product(attributes=("cotton",)), {"size": "large", "color": "red"}, 4 / 5),  # one attribute missing
    (product(attributes=("polyester",), price=99.0), {"color": "blue"}, 0.0),  # nothing matches but type
])
def test_partial_purchases(bought, selected, expected):
    assert score_purchase(goal(), bought, selected).score == pytest.approx(expected)


def test_goal_without_options_counts_attributes_and_price_only():
    g = goal(attributes=("cotton", "slim fit", "machine washable"), options={})
    assert score_purchase(g, product(price=30.0), {}).score == pytest.approx(3 / 4)


def test_other_department_without_a_shared_name_noun_gets_no_type_credit():
    hoodie = product(type="hoodie", category=("clothing", "women", "hoodie"), nouns=("women", "hoodie"))
    assert type_reward(product(), hoodie) == (0.0, False, False, 0.0)  # one category level, no noun
    assert score_purchase(goal(), hoodie, {"size": "large", "color": "red"}).score == 0.0


def test_same_department_shares_the_department_noun():
    hoodie = product(type="hoodie", category=("clothing", "men", "hoodie"), nouns=("men", "hoodie"))
    assert type_reward(product(), hoodie) == (1.0, False, True, pytest.approx(1 / 3))


def test_shared_category_and_noun_gives_full_type_credit():
    green = product(type="green tea", category=("grocery", "beverages", "green tea"), nouns=("green", "tea"))
    herbal = product(type="herbal tea", category=("grocery", "beverages", "herbal tea"), nouns=("herbal", "tea"))
    r_type, query_match, category_match, title_score = type_reward(green, herbal)
    assert (r_type, query_match, category_match, title_score) == (1.0, False, True, 0.5)


def test_weak_name_overlap_without_category_match_halves_the_score():
    wanted = product(type="a", category=("x", "y", "a"), nouns=("n1", "n2", "n3", "n4", "n5"))
    bought = product(type="b", category=("p", "q", "b"), nouns=("n1", "other"))
    assert type_reward(wanted, bought) == (0.5, False, False, 0.2)  # 1/5 is not > 0.2
    g = goal(wanted, attributes=("cotton",), options={"size": "large"}, price_upper=50.0)
    assert score_purchase(g, bought, {"size": "large"}).score == pytest.approx(0.5)


def test_tiny_name_overlap_gives_a_tenth():
    nouns = tuple(f"n{i}" for i in range(11))
    wanted = product(type="a", category=("x", "y", "a"), nouns=nouns)
    bought = product(type="b", category=("x", "q", "b"), nouns=("n0",))
    assert type_reward(wanted, bought)[0] == 0.1  # 1/11 < 0.1

