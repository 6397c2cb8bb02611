"""The shipped catalogue: reproducible from the script, consistent, every goal satisfiable."""

from __future__ import annotations

import gzip
import hashlib
from importlib import resources

from roll_env_webshop.catalog import TEST_EVERY, load_catalog, read_catalog_bytes
from roll_env_webshop.policies import expected_score


def test_shipped_catalogue_equals_a_fresh_generation(generator):
    fresh = generator.to_bytes(generator.generate())
    shipped = read_catalog_bytes()
    assert hashlib.sha256(shipped).hexdigest() == hashlib.sha256(fresh).hexdigest(), (
        "the shipped catalogue differs from scripts/generate_catalog.py's output; rerun the script"
    )


def test_generation_is_deterministic_and_seed_dependent(generator):
    assert generator.to_bytes(generator.generate(seed=7, per_type=2)) == generator.to_bytes(
        generator.generate(seed=7, per_type=2))
    assert generator.generate(seed=7, per_type=2) != generator.generate(seed=8, per_type=2)


def test_shipped_file_is_a_timestamp_free_gzip():
    raw = resources.files("roll_env_webshop").joinpath("data/catalog.json.gz").read_bytes()
    assert raw[:2] == b"\x1f\x8b" and raw[4:8] == b"\0\0\0\0"  # gzip magic, mtime 0
    assert gzip.decompress(raw) == read_catalog_bytes()


def test_catalogue_size_and_shape():
    catalog = load_catalog()
    assert 2000 <= len(catalog.products) <= 10000
    assert len(catalog.by_id) == len(catalog.products)
    assert {p.category[0] for p in catalog.products} >= {
        "clothing", "shoes", "electronics", "home", "beauty", "grocery"}
    for product in catalog.products:
        values = [v for vs in product.options.values() for v in vs]
        assert len(values) == len(set(values)), product.id  # a click names one option value
        assert 3 <= len(product.attributes) <= 5 and product.price > 0


def test_every_goal_is_satisfiable_by_its_product():
    catalog = load_catalog()
    for goal in catalog.goals:
        target = goal.target
        assert 1 <= len(goal.attributes) <= 3
        assert set(goal.attributes) <= set(target.attributes)
        assert all(v in target.options[name] for name, v in goal.options.items())
        assert target.price < goal.price_upper
        assert f"{goal.price_upper:.2f} dollars" in goal.instruction
        assert all(a in goal.instruction for a in goal.attributes)
        assert all(v in goal.instruction for v in goal.options.values())
        assert expected_score(goal, target) == 1.0


def test_splits_partition_the_goals():
    catalog = load_catalog()
    train, test = catalog.split("train"), catalog.split("test")
    assert len(train) + len(test) == len(catalog.split("all")) == len(catalog.goals)
    assert not {g.index for g in train} & {g.index for g in test}
    assert all(g.index % TEST_EVERY == 0 for g in test)


def test_catalogue_is_loaded_once_per_process(tmp_path, generator):
    assert load_catalog() is load_catalog()
    path = tmp_path / "small.json"
    generator.write(generator.generate(seed=3, per_type=1), path)
    small = load_catalog(path)
    assert small is load_catalog(str(path)) and len(small.products) == len(generator.PRODUCT_TYPES)
