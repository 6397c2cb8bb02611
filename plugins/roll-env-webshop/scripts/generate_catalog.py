#!/usr/bin/env python
"""Generate the WebShop catalogue and goal set shipped with roll-env-webshop.

Everything comes from the templates and vocabularies below and one seeded ``random.Random``, so
the output is a pure function of ``--seed`` and ``--per-type``: the test suite regenerates it and
compares it with the shipped file. Only the standard library is used (``random``'s generator and
its ``choice``/``sample``/``uniform`` are stable across Python versions), no set of strings is
ever iterated (hash order varies per process), and gzip's timestamp is pinned to 0.

Usage::

    python scripts/generate_catalog.py                        # rewrite the shipped file
    python scripts/generate_catalog.py --out /tmp/cat.json.gz --per-type 200   # a bigger shop

Every goal is derived from one product (a subset of its attributes, one value of each of its
options, a price ceiling above its price), so every instruction has at least one item scoring 1.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
from pathlib import Path

SEED = 2022
PER_TYPE = 40
FORMAT_VERSION = 1
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "src" / "roll_env_webshop" / "data" / "catalog.json.gz"

# -- vocabularies --------------------------------------------------------------------------
COLORS = ["black", "white", "navy blue", "heather grey", "red", "olive green", "burgundy", "khaki",
          "pink", "royal blue", "charcoal", "beige", "teal", "mustard yellow"]
DEVICE_COLORS = ["black", "white", "silver", "space grey", "blue", "rose gold", "green", "purple"]
HOME_COLORS = ["white", "ivory", "light grey", "dark grey", "navy", "sage green", "blush pink",
               "taupe", "black", "terracotta", "sky blue"]

#: option set key -> (name shown on the item page, values in display order)
OPTION_SETS: dict[str, tuple[str, list[str]]] = {
    "apparel size": ("size", ["x-small", "small", "medium", "large", "x-large", "xx-large"]),
    "shoe size": ("size", ["6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12"]),
    "color": ("color", COLORS),
    "device color": ("color", DEVICE_COLORS),
    "home color": ("color", HOME_COLORS),
    "phone model": ("compatible model", ["iphone 15", "iphone 15 pro", "iphone 16", "iphone 16 pro max",
                                         "galaxy s24", "galaxy s24 ultra", "pixel 8", "pixel 9"]),
    "cable length": ("length", ["1 ft", "3 ft", "6 ft", "10 ft"]),
    "battery": ("capacity", ["5000mah", "10000mah", "20000mah", "26800mah"]),
    "wattage": ("power", ["20w", "30w", "45w", "65w", "100w"]),
    "laptop size": ("size", ["11 inch", "13 inch", "14 inch", "15.6 inch", "17 inch"]),
    "bed size": ("size", ["twin", "twin xl", "full", "queen", "king", "california king"]),
    "pillow size": ("size", ["standard", "queen size", "king size"]),
    "drink capacity": ("capacity", ["12 oz", "16 oz", "20 oz", "24 oz", "32 oz", "40 oz"]),
    "pack": ("pack", ["pack of 2", "pack of 3", "pack of 4", "pack of 6", "pack of 12", "pack of 24"]),
    "board size": ("size", ["small", "medium", "large", "extra large"]),
    "cushion size": ("size", ["16x16 inch", "18x18 inch", "20x20 inch", "24x24 inch"]),
    "curtain size": ("size", ["52x63 inch", "52x84 inch", "52x95 inch", "52x108 inch"]),
    "frame size": ("size", ["4x6 inch", "5x7 inch", "8x10 inch", "11x14 inch"]),
    "jar cream size": ("size", ["0.5 fl oz", "1 fl oz", "1.7 fl oz", "3.4 fl oz"]),
    "bottle size": ("size", ["8 fl oz", "12 fl oz", "16 fl oz", "32 fl oz"]),
    "scent": ("scent", ["lavender", "coconut", "citrus", "vanilla", "eucalyptus mint", "rose",
                        "sandalwood", "unscented"]),
    "lip flavor": ("flavor", ["mint", "vanilla", "cherry", "honey", "unflavored"]),
    "bar flavor": ("flavor", ["chocolate chip", "peanut butter", "cookies and cream", "blueberry",
                              "salted caramel", "almond"]),
    "chip flavor": ("flavor", ["sea salt", "barbecue", "sour cream and onion", "salt and vinegar",
                               "jalapeno"]),
    "granola flavor": ("flavor", ["honey almond", "dark chocolate", "cinnamon", "mixed berry"]),
    "tea flavor": ("flavor", ["jasmine", "peppermint", "lemon ginger", "peach", "original"]),
    "water flavor": ("flavor", ["lime", "grapefruit", "black cherry", "lemon", "unflavored"]),
    "roast": ("roast", ["light roast", "medium roast", "dark roast"]),
    "coffee size": ("size", ["12 ounce", "2 pound", "5 pound"]),
    "tea count": ("count", ["20 count", "50 count", "100 count"]),
    "oil size": ("size", ["16.9 fl oz", "25.3 fl oz", "33.8 fl oz", "68 fl oz"]),
    "jar size": ("size", ["12 ounce", "16 ounce", "28 ounce", "40 ounce"]),
    "texture": ("texture", ["creamy", "crunchy"]),
    "pasta shape": ("shape", ["penne", "spaghetti", "fusilli", "rigatoni", "farfalle"]),
}

#: attribute pool key -> attributes (every one plausible for every type drawing from the pool)
ATTRIBUTE_POOLS: dict[str, list[str]] = {
    "tops": ["cotton", "polyester blend", "machine washable", "slim fit", "relaxed fit", "long sleeve",
             "short sleeve", "moisture wicking", "quick drying", "wrinkle free", "breathable", "tagless"],
    "bottoms": ["cotton", "stretch fabric", "machine washable", "slim fit", "relaxed fit", "elastic waist",
                "button closure", "high waist", "side pockets", "moisture wicking", "wrinkle free"],
    "outerwear": ["zipper closure", "fleece lined", "lightweight", "machine washable", "water resistant",
                  "windproof", "packable", "insulated", "relaxed fit", "side pockets"],
    "dresses": ["cotton", "machine washable", "short sleeve", "sleeveless", "v neck", "side pockets",
                "floral print", "midi length", "wrinkle free", "stretch fabric"],
    "shoes": ["non slip", "rubber sole", "lace up", "slip on", "memory foam", "lightweight", "waterproof",
              "arch support", "breathable mesh", "leather upper", "wide width", "cushioned insole"],
    "phone case": ["shockproof", "slim design", "anti scratch", "magnetic", "wireless charging compatible",
                   "raised edges", "crystal clear", "drop tested", "kickstand", "soft silicone"],
    "screen protector": ["tempered glass", "anti scratch", "bubble free", "easy installation",
                         "case friendly", "anti glare", "privacy filter", "crystal clear", "9h hardness"],
    "charging": ["usb c", "fast charging", "led indicator", "braided", "compact", "magnetic",
                 "overcharge protection", "travel friendly", "universal compatibility", "foldable plug"],
    "computer": ["plug and play", "usb c", "wireless", "ergonomic design", "rechargeable", "slim design",
                 "bluetooth", "compact", "aluminum", "quiet"],
    "bags": ["water resistant", "shockproof", "padded", "slim design", "zipper closure", "side pockets",
             "lightweight", "vegan leather"],
    "audio": ["bluetooth 5.3", "noise cancelling", "long battery life", "water resistant",
              "built in microphone", "fast charging", "lightweight", "touch control", "usb c", "deep bass"],
    "bedding": ["microfiber", "cotton", "machine washable", "hypoallergenic", "deep pocket", "breathable",
                "wrinkle free", "cooling", "down alternative", "fade resistant"],
    "drinkware": ["dishwasher safe", "bpa free", "stainless steel", "double insulated", "leak proof",
                  "microwave safe", "ceramic", "lightweight", "easy to clean", "lidded"],
    "kitchen": ["dishwasher safe", "bpa free", "easy to clean", "non slip", "bamboo", "reusable",
                "stackable", "heavy duty", "eco friendly"],
    "decor": ["modern design", "farmhouse style", "easy to install", "fade resistant", "machine washable",
              "blackout", "battery operated", "dimmable", "handmade", "minimalist"],
    "skin care": ["paraben free", "fragrance free", "cruelty free", "vegan", "dermatologist tested",
                  "for sensitive skin", "hyaluronic acid", "vitamin c", "oil free", "non comedogenic",
                  "spf 30", "travel size"],
    "hair care": ["sulfate free", "paraben free", "cruelty free", "vegan", "for dry hair", "color safe",
                  "natural ingredients", "argan oil", "volumizing", "travel size"],
    "bath": ["paraben free", "cruelty free", "vegan", "moisturizing", "natural ingredients",
             "for sensitive skin", "essential oils", "long lasting", "gift set", "travel size"],
    "snacks": ["gluten free", "non gmo", "high protein", "low sugar", "keto friendly",
               "individually wrapped", "kosher", "vegan", "whole grain", "no artificial flavors"],
    "beverages": ["organic", "non gmo", "sugar free", "fair trade", "kosher", "zero calories",
                  "no artificial flavors", "caffeine free", "gluten free", "vegan"],
    "pantry": ["organic", "non gmo", "gluten free", "kosher", "no sugar added", "dairy free", "vegan",
               "family size", "whole wheat", "small batch"],
    "spreads": ["organic", "non gmo", "kosher", "no sugar added", "small batch", "glass bottle",
                "family size", "pure", "unfiltered", "vegan"],
}

#: (category path, product type, attribute pool, option sets, price range in dollars)
PRODUCT_TYPES: list[tuple[tuple[str, str], str, str, tuple[str, ...], tuple[int, int]]] = [
    (("clothing", "men"), "t-shirt", "tops", ("apparel size", "color"), (8, 35)),
    (("clothing", "men"), "polo shirt", "tops", ("apparel size", "color"), (15, 55)),
    (("clothing", "men"), "hoodie", "outerwear", ("apparel size", "color"), (20, 70)),
    (("clothing", "men"), "chino pants", "bottoms", ("apparel size", "color"), (20, 65)),
    (("clothing", "men"), "jeans", "bottoms", ("apparel size", "color"), (25, 90)),
    (("clothing", "men"), "rain jacket", "outerwear", ("apparel size", "color"), (35, 150)),
    (("clothing", "women"), "blouse", "tops", ("apparel size", "color"), (15, 60)),
    (("clothing", "women"), "tank top", "tops", ("apparel size", "color"), (8, 30)),
    (("clothing", "women"), "sundress", "dresses", ("apparel size", "color"), (20, 80)),
    (("clothing", "women"), "leggings", "bottoms", ("apparel size", "color"), (12, 50)),
    (("clothing", "women"), "cardigan", "outerwear", ("apparel size", "color"), (20, 75)),
    (("clothing", "women"), "puffer vest", "outerwear", ("apparel size", "color"), (30, 110)),
    (("shoes", "men"), "running shoes", "shoes", ("shoe size", "color"), (40, 160)),
    (("shoes", "men"), "hiking boots", "shoes", ("shoe size", "color"), (55, 200)),
    (("shoes", "men"), "loafers", "shoes", ("shoe size", "color"), (35, 140)),
    (("shoes", "men"), "canvas sneakers", "shoes", ("shoe size", "color"), (25, 80)),
    (("shoes", "women"), "ballet flats", "shoes", ("shoe size", "color"), (20, 90)),
    (("shoes", "women"), "ankle boots", "shoes", ("shoe size", "color"), (40, 170)),
    (("shoes", "women"), "sandals", "shoes", ("shoe size", "color"), (18, 80)),
    (("shoes", "women"), "walking shoes", "shoes", ("shoe size", "color"), (35, 130)),
    (("electronics", "phone accessories"), "phone case", "phone case", ("phone model", "device color"), (8, 45)),
    (("electronics", "phone accessories"), "screen protector", "screen protector", ("phone model",), (6, 25)),
    (("electronics", "phone accessories"), "charging cable", "charging", ("cable length", "device color"), (6, 25)),
    (("electronics", "phone accessories"), "wireless charger", "charging", ("device color",), (12, 60)),
    (("electronics", "phone accessories"), "power bank", "charging", ("battery", "device color"), (15, 80)),
    (("electronics", "phone accessories"), "wall charger", "charging", ("wattage", "device color"), (10, 50)),
    (("electronics", "computer accessories"), "laptop sleeve", "bags", ("laptop size", "device color"), (12, 50)),
    (("electronics", "computer accessories"), "wireless mouse", "computer", ("device color",), (10, 70)),
    (("electronics", "computer accessories"), "mechanical keyboard", "computer", ("device color",), (35, 180)),
    (("electronics", "computer accessories"), "usb c hub", "computer", ("device color",), (15, 80)),
    (("electronics", "computer accessories"), "webcam", "computer", ("device color",), (25, 150)),
    (("electronics", "audio"), "wireless earbuds", "audio", ("device color",), (20, 200)),
    (("electronics", "audio"), "over-ear headphones", "audio", ("device color",), (30, 350)),
    (("electronics", "audio"), "bluetooth speaker", "audio", ("device color",), (20, 180)),
    (("electronics", "audio"), "soundbar", "audio", ("device color",), (60, 400)),
    (("home", "bedding"), "sheet set", "bedding", ("bed size", "home color"), (25, 140)),
    (("home", "bedding"), "comforter", "bedding", ("bed size", "home color"), (35, 180)),
    (("home", "bedding"), "bed pillows", "bedding", ("pillow size", "pack"), (20, 90)),
    (("home", "bedding"), "mattress topper", "bedding", ("bed size",), (40, 220)),
    (("home", "bedding"), "duvet cover", "bedding", ("bed size", "home color"), (25, 120)),
    (("home", "kitchen"), "coffee mug", "drinkware", ("drink capacity", "home color"), (8, 35)),
    (("home", "kitchen"), "water bottle", "drinkware", ("drink capacity", "home color"), (10, 45)),
    (("home", "kitchen"), "cutting board", "kitchen", ("board size",), (12, 60)),
    (("home", "kitchen"), "dish towels", "kitchen", ("pack", "home color"), (8, 30)),
    (("home", "kitchen"), "food storage containers", "kitchen", ("pack",), (15, 60)),
    (("home", "decor"), "throw pillow cover", "decor", ("cushion size", "home color"), (8, 35)),
    (("home", "decor"), "curtains", "decor", ("curtain size", "home color"), (18, 90)),
    (("home", "decor"), "table lamp", "decor", ("home color",), (20, 120)),
    (("home", "decor"), "wall clock", "decor", ("home color",), (15, 80)),
    (("home", "decor"), "picture frame", "decor", ("frame size", "home color"), (8, 45)),
    (("beauty", "skin care"), "face moisturizer", "skin care", ("jar cream size",), (8, 60)),
    (("beauty", "skin care"), "sunscreen", "skin care", ("bottle size",), (8, 40)),
    (("beauty", "skin care"), "face serum", "skin care", ("jar cream size",), (10, 70)),
    (("beauty", "skin care"), "lip balm", "skin care", ("lip flavor", "pack"), (4, 20)),
    (("beauty", "hair care"), "shampoo", "hair care", ("bottle size", "scent"), (6, 40)),
    (("beauty", "hair care"), "conditioner", "hair care", ("bottle size", "scent"), (6, 40)),
    (("beauty", "hair care"), "hair oil", "hair care", ("jar cream size", "scent"), (8, 45)),
    (("beauty", "hair care"), "dry shampoo", "hair care", ("bottle size", "scent"), (6, 30)),
    (("beauty", "bath"), "body wash", "bath", ("bottle size", "scent"), (5, 30)),
    (("beauty", "bath"), "bath bombs", "bath", ("pack", "scent"), (10, 45)),
    (("beauty", "bath"), "hand soap", "bath", ("pack", "scent"), (5, 30)),
    (("beauty", "bath"), "body lotion", "bath", ("bottle size", "scent"), (6, 35)),
    (("grocery", "snacks"), "protein bars", "snacks", ("bar flavor", "pack"), (10, 45)),
    (("grocery", "snacks"), "trail mix", "snacks", ("pack",), (8, 35)),
    (("grocery", "snacks"), "potato chips", "snacks", ("chip flavor", "pack"), (5, 30)),
    (("grocery", "snacks"), "granola", "snacks", ("granola flavor", "jar size"), (5, 25)),
    (("grocery", "beverages"), "green tea", "beverages", ("tea flavor", "tea count"), (5, 30)),
    (("grocery", "beverages"), "herbal tea", "beverages", ("tea flavor", "tea count"), (5, 30)),
    (("grocery", "beverages"), "coffee beans", "beverages", ("roast", "coffee size"), (10, 60)),
    (("grocery", "beverages"), "sparkling water", "beverages", ("water flavor", "pack"), (6, 30)),
    (("grocery", "pantry"), "olive oil", "spreads", ("oil size",), (8, 45)),
    (("grocery", "pantry"), "honey", "spreads", ("jar size",), (6, 35)),
    (("grocery", "pantry"), "peanut butter", "spreads", ("texture", "jar size"), (4, 20)),
    (("grocery", "pantry"), "pasta", "pantry", ("pasta shape", "pack"), (4, 25)),
    (("grocery", "pantry"), "maple syrup", "spreads", ("oil size",), (8, 40)),
]

#: types named in the plural take no article in instructions ("i need running shoes ...")
PLURAL_TYPES = ["chino pants", "jeans", "leggings", "running shoes", "hiking boots", "loafers",
                "canvas sneakers", "ballet flats", "ankle boots", "sandals", "walking shoes",
                "wireless earbuds", "over-ear headphones", "bed pillows", "dish towels",
                "food storage containers", "curtains", "bath bombs", "protein bars", "potato chips",
                "coffee beans"]
UNCOUNTABLE_TYPES = ["sunscreen", "shampoo", "conditioner", "hair oil", "dry shampoo", "body wash",
                     "hand soap", "body lotion", "trail mix", "granola", "green tea", "herbal tea",
                     "sparkling water", "olive oil", "honey", "peanut butter", "pasta", "maple syrup",
                     "lip balm", "face moisturizer", "face serum"]

BRANDS: dict[str, list[str]] = {
    "clothing": ["Northpeak", "Lumora", "Vantor", "Kestrel & Co", "Ashgrove", "Tidewell", "Marlo",
                 "Juniper Lane"],
    "shoes": ["Stridewell", "Kestrel & Co", "Trailborn", "Aveline", "Pacecraft", "Mossfield", "Solano"],
    "electronics": ["Voltaic", "Nexra", "Ampline", "Corelink", "Auralis", "Pixon", "Brightcell", "Zentro"],
    "home": ["Hearthly", "Oakmere", "Linenry", "Casa Pura", "Driftwood Home", "Nestwell", "Fernhill"],
    "beauty": ["Petalia", "Aurum Botanics", "Clearwell", "Dewlab", "Saltmoss", "Verdance", "Lunette"],
    "grocery": ["Harvest Row", "Goldleaf", "Brookside Farms", "Nutterra", "Sunmeadow", "Kettle & Crane",
                "Alpine Grove"],
}

TITLE_TAILS: dict[str, list[str]] = {
    "clothing": ["", "", "for Everyday Wear", "- Classic Fit", "for Work and Casual"],
    "shoes": ["", "", "for Everyday Comfort", "- All Day Wear", "for Travel"],
    "electronics": ["", "", "for Home and Office", "- Upgraded Version", "with 2-Year Warranty"],
    "home": ["", "", "for Bedroom and Living Room", "- Gift Idea", "for Everyday Use"],
    "beauty": ["", "", "for Daily Use", "- Salon Quality", "for All Skin Types"],
    "grocery": ["", "", "- Value Pack", "for Pantry and Snacking", "- Family Favorite"],
}

DESCRIPTION_CLOSERS: dict[str, list[str]] = {
    "clothing": ["Pairs easily with the rest of your wardrobe.", "Cut for comfort from morning to night.",
                 "Holds its shape wash after wash."],
    "shoes": ["Designed for long days on your feet.", "A reliable pair for every season.",
              "Built to keep every step comfortable."],
    "electronics": ["Backed by friendly customer support.", "Tested for everyday reliability.",
                    "A simple upgrade for your setup."],
    "home": ["Brings a calm, finished look to any room.", "Made to be used every day.",
             "An easy way to refresh your home."],
    "beauty": ["Gentle enough for everyday routines.", "Formulated with care and tested for quality.",
               "A small luxury for your daily routine."],
    "grocery": ["Stock up and enjoy it all week.", "Carefully sourced and packed for freshness.",
                "A pantry staple for busy households."],
}

INSTRUCTION_OPENERS = ["i'm looking for", "i need", "i want to buy", "find me", "i am shopping for",
                       "please find"]

#: option name -> phrase used in instructions
OPTION_PHRASES: dict[str, str] = {
    "size": "in size {v}",
    "color": "in {v} color",
    "compatible model": "that fits the {v}",
    "length": "with a length of {v}",
    "capacity": "with a capacity of {v}",
    "power": "rated at {v}",
    "pack": "in a {v}",
    "scent": "with {v} scent",
    "flavor": "in {v} flavor",
    "roast": "in {v}",
    "count": "in the {v} box",
    "texture": "with {v} texture",
    "shape": "in {v} shape",
}
GENDER_PREFIX = {"men": "men's ", "women": "women's "}
ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


# -- generation ----------------------------------------------------------------------------
def _price(rng: random.Random, low: int, high: int) -> float:
    """A shop-like price ending in .99 or .49 within [low, high]."""
    return round(rng.randint(low, high) + rng.choice([-0.01, -0.51]), 2)


def _price_ceiling(rng: random.Random, price: float) -> float:
    """A round ceiling 5-60% above the price (the goal's ``price lower than`` figure)."""
    raw = price * rng.uniform(1.05, 1.6)
    step = 1 if raw < 20 else 5 if raw < 100 else 10
    return float(max(math.ceil(raw / step) * step, math.floor(price) + 1))


def _product_id(rng: random.Random, taken: set[str]) -> str:
    """An ASIN-like id (``b0`` + 8 base-36 characters), unique in the catalogue."""
    while True:
        pid = "b0" + "".join(rng.choice(ID_ALPHABET) for _ in range(8))
        if pid not in taken:
            taken.add(pid)
            return pid


def _title_case(phrase: str) -> str:
    return " ".join(word[:1].upper() + word[1:] for word in phrase.split())


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _type_phrase(path: tuple[str, str], ptype: str) -> str:
    return GENDER_PREFIX.get(path[1], "") + ptype


def _article(ptype: str, phrase: str) -> str:
    if ptype in PLURAL_TYPES or ptype in UNCOUNTABLE_TYPES:
        return ""
    return "an " if phrase[0] in "aeiou" else "a "


def make_product(rng: random.Random, taken: set[str], path, ptype, pool, option_keys, prices) -> dict:
    category = path[0]
    attributes = rng.sample(ATTRIBUTE_POOLS[pool], rng.randint(3, 5))
    options = {}
    for key in option_keys:
        name, values = OPTION_SETS[key]
        chosen = rng.sample(values, rng.randint(min(2, len(values)), min(6, len(values))))
        options[name] = [v for v in values if v in chosen]  # keep the vocabulary's display order
    flat = [v for values in options.values() for v in values]
    assert len(flat) == len(dict.fromkeys(flat)), f"option values collide in {ptype}: {options}"
    brand = rng.choice(BRANDS[category])
    in_title = attributes[: rng.randint(0, 2)]
    gender = GENDER_PREFIX.get(path[1], "").strip()
    tail = rng.choice(TITLE_TAILS[category])
    title = " ".join(p for p in [brand, _title_case(gender), *map(_title_case, in_title),
                                 _title_case(ptype), tail] if p)
    description = (
        f"The {brand} {ptype} at a glance: {_join(attributes)}. "
        f"Available in {_join([f'{len(v)} {n} options' for n, v in options.items()])}. "
        f"{rng.choice(DESCRIPTION_CLOSERS[category])}"
    )
    features = [_title_case(a) for a in attributes] + [f"Brand: {brand}"]
    # the product-type nouns WebShop's type match compares (gender noun + the type's words)
    nouns = ([path[1]] if path[1] in GENDER_PREFIX else []) + ptype.replace("-", " ").split()
    return {
        "id": _product_id(rng, taken),
        "title": title,
        "category": [category, path[1], ptype],
        "type": ptype,
        "type_nouns": nouns,
        "brand": brand,
        "price": _price(rng, *prices),
        "attributes": attributes,
        "options": options,
        "description": description,
        "features": features,
    }


def make_goal(rng: random.Random, product: dict) -> dict:
    attributes = rng.sample(product["attributes"], rng.choice([1, 2, 2, 3, 3]))
    attributes = [a for a in product["attributes"] if a in attributes]
    options = {name: rng.choice(values) for name, values in product["options"].items()}
    ceiling = _price_ceiling(rng, product["price"])
    phrase = _type_phrase((product["category"][0], product["category"][1]), product["type"])
    opts = " and ".join(OPTION_PHRASES[n].format(v=v) for n, v in options.items())
    instruction = (
        f"{rng.choice(INSTRUCTION_OPENERS)} {_article(product['type'], phrase)}{phrase} "
        f"that {'are' if product['type'] in PLURAL_TYPES else 'is'} {_join(attributes)}"
        f"{', ' + opts if opts else ''}, and price lower than {ceiling:.2f} dollars"
    )
    return {"product": product["id"], "attributes": attributes, "options": options,
            "price_upper": ceiling, "instruction": instruction}


def generate(seed: int = SEED, per_type: int = PER_TYPE) -> dict:
    """The whole catalogue as a JSON-ready dict; a pure function of its arguments."""
    rng = random.Random(seed)
    taken: set[str] = set()
    products = [make_product(rng, taken, *spec) for spec in PRODUCT_TYPES for _ in range(per_type)]
    rng.shuffle(products)
    goals = [make_goal(rng, p) for p in products]
    rng.shuffle(goals)
    return {"format": FORMAT_VERSION, "seed": seed, "per_type": per_type,
            "products": products, "goals": goals}


def to_bytes(catalog: dict) -> bytes:
    """Canonical JSON bytes (sorted keys, compact) — what the reproducibility test hashes."""
    return json.dumps(catalog, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def write(catalog: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    data = to_bytes(catalog)
    if out.suffix == ".gz":
        data = gzip.compress(data, compresslevel=9, mtime=0)
    out.write_bytes(data)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--per-type", type=int, default=PER_TYPE, help="products per product type")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output .json or .json.gz")
    args = parser.parse_args(argv)
    catalog = generate(args.seed, args.per_type)
    write(catalog, args.out)
    print(f"wrote {len(catalog['products'])} products and {len(catalog['goals'])} goals to {args.out}")


if __name__ == "__main__":
    main()
