"""WebShop: buy the product an instruction describes, by searching and clicking through a shop.

A self-contained take on WebShop (Yao et al., 2022): the catalogue ships with the package, search
is BM25 in-process, and pages are rendered as text, so the env needs no Java, no server and no
download. Pages and the clickable elements on each:

``search``        ``search[query]`` (the only page where searching is possible)
``results``       ``back to search``, ``< prev`` / ``next >`` (10 results a page), a product id
``item``          ``back to search``, ``< prev`` (to the results), an option value (selects it),
                  ``description``, ``features``, ``buy now``
``description`` / ``features``   ``back to search``, ``< prev`` (to the item)

Actions are free-form (``<answer>click[next >]</answer>``); one that is not available on the
current page is invalid: format penalty, nothing changes. ``buy now`` ends the episode with the
purchase score of :mod:`roll_env_webshop.reward` as reward; ``success`` means a score of 1.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from functools import partial
from typing import Any, Literal

import numpy as np
from pydantic import Field

from roll_core.envs import EnvConfig, StepOutcome, TextEnv
from roll_env_webshop.catalog import Catalog, Goal, Product, load_catalog
from roll_env_webshop.reward import PurchaseScore, score_purchase

ACTION = re.compile(r"\s*(search|click)\s*\[(.*)\]\s*", re.IGNORECASE | re.DOTALL)
BACK, PREV, NEXT, BUY = "back to search", "< prev", "next >", "buy now"


def _norm(text: str) -> str:
    return " ".join(text.strip().strip("'\"").lower().split())


class WebShopConfig(EnvConfig):
    """``env_config`` of the webshop env."""

    max_steps: int = Field(15, ge=1, description="Steps before the episode is truncated.")
    goal_split: Literal["all", "train", "test"] = Field(
        "all", description="Goals to draw from: every 10th goal is 'test', the others 'train'."
    )
    results_per_page: int = Field(10, ge=1, description="Search results shown on one page.")
    max_results: int = Field(50, ge=1, description="Search results kept for a query (all pages).")
    catalog_path: str | None = Field(
        None, description="A catalogue made by scripts/generate_catalog.py; the shipped one if unset."
    )


class WebShopEnv(TextEnv):
    """Text WebShop: search a shipped catalogue with BM25, open items, pick options, buy.

    ``reset(seed=...)`` draws a goal from the configured split (``options={"goal_index": i}``
    picks one directly, by position in the split); ``info["goal_index"]`` says which.
    """

    config_model = WebShopConfig
    action_lookup = None

    def __init__(self, config: WebShopConfig | dict[str, Any] | None = None, **overrides: Any):
        super().__init__(config, **overrides)
        self.catalog: Catalog = load_catalog(self.config.catalog_path)
        self.goals: tuple[Goal, ...] = self.catalog.split(self.config.goal_split)
        self.goal: Goal | None = None
        self.page = "done"
        self.queries: list[str] = []
        self.results: list[Product] = []
        self.result_page = 0
        self.product: Product | None = None
        self.selected: dict[str, str] = {}
        self.purchase: PurchaseScore | None = None

    # -- TextEnv hooks ---------------------------------------------------------------------
    def default_instruction(self) -> str:
        fmt = self.parser.format
        return (
            "You are shopping in WebShop, an online store. Every observation shows the instruction "
            "that describes the product to buy, the current page and the actions available on it. "
            f"Give one action per turn: {fmt('search[your query]')} on the search page, or "
            f"{fmt('click[element]')} with an element listed as available (a product id, an "
            "option value, 'next >', '< prev', 'back to search', 'description', 'features', "
            "'buy now'). Open items to check their features, select the wanted options, then "
            f"{fmt('click[buy now]')}. The purchase ends the episode; its reward (0 to 1) grows "
            "with how well the product's type, attributes, selected options and price match the "
            "instruction. An action that is not available changes nothing and is penalised."
        )

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        index = options.get("goal_index")
        if index is None:
            index = int(self.np_random.integers(len(self.goals)))
        elif not 0 <= index < len(self.goals):
            raise ValueError(f"goal_index {index} is out of range: the {self.config.goal_split!r} split "
                             f"has {len(self.goals)} goals")
        self.goal = self.goals[index]
        self.page, self.queries, self.results, self.result_page = "search", [], [], 0
        self.product, self.selected, self.purchase = None, {}, None
        return self.render_text(), {"goal_index": index, "goal": self.goal.instruction}

    def _step(self, action: str) -> StepOutcome | None:
        match = ACTION.fullmatch(action)
        if match is None:
            return None
        verb, argument = match.group(1).lower(), _norm(match.group(2))
        return {"search": self._search, "click": self._click}[verb](argument)

    def valid_actions(self) -> list[str]:
        """The actions available now; on the search page, the instruction's request as the query.

        The search bar takes any text; the request is the query a policy that only reads the
        observation could type, so random and keyboard play can always reach the results.
        """
        if self.page == "search":
            return [f"search[{self.goal.request}]"]
        return [f"click[{element}]" for element in self._clickables()]

    def example_action(self) -> str:
        """A format example that fits every page, rather than this goal's own search query."""
        return "search[keywords] or click[element]"

    def solve(self) -> list[str]:
        """The scripted oracle's remaining actions from here (``roll env play --policy scripted``)."""
        from roll_env_webshop.policies import oracle_plan

        return oracle_plan(self)

    # -- actions ---------------------------------------------------------------------------
    def _search(self, query: str) -> StepOutcome | None:
        if self.page != "search" or not query:
            return None
        self.queries.append(query)
        self.results = self.catalog.search_engine().search(query, self.config.max_results)
        self.page, self.result_page = "results", 0
        return StepOutcome(reward=0.0, info={"num_results": len(self.results)})

    def _click(self, element: str) -> StepOutcome | None:
        handler = self._clickables().get(element)
        return None if handler is None else handler()

    def _clickables(self) -> dict[str, Callable[[], StepOutcome]]:
        """Element label -> handler, for the current page (what the observation lists)."""
        return {
            "search": dict,
            "results": self._results_clickables,
            "item": self._item_clickables,
            "description": self._subpage_clickables,
            "features": self._subpage_clickables,
            "done": dict,
        }[self.page]()

    def _results_clickables(self) -> dict[str, Callable[[], StepOutcome]]:
        elements: dict[str, Callable[[], StepOutcome]] = {BACK: partial(self._goto, "search")}
        if self.result_page > 0:
            elements[PREV] = partial(self._turn, -1)
        if self.result_page + 1 < self.num_result_pages:
            elements[NEXT] = partial(self._turn, +1)
        elements.update({p.id: partial(self._open, p) for p in self.page_results()})
        return elements

    def _item_clickables(self) -> dict[str, Callable[[], StepOutcome]]:
        elements: dict[str, Callable[[], StepOutcome]] = {
            BACK: partial(self._goto, "search"), PREV: partial(self._goto, "results"),
        }
        for name, values in self.product.options.items():
            elements.update({v: partial(self._select, name, v) for v in values})
        elements.update({"description": partial(self._goto, "description"),
                         "features": partial(self._goto, "features"), BUY: self._buy})
        return elements

    def _subpage_clickables(self) -> dict[str, Callable[[], StepOutcome]]:
        return {BACK: partial(self._goto, "search"), PREV: partial(self._goto, "item")}

    def _goto(self, page: str) -> StepOutcome:
        self.page = page
        return StepOutcome(reward=0.0)

    def _turn(self, delta: int) -> StepOutcome:
        self.result_page += delta
        return StepOutcome(reward=0.0)

    def _open(self, product: Product) -> StepOutcome:
        self.product, self.selected, self.page = product, {}, "item"
        return StepOutcome(reward=0.0)

    def _select(self, name: str, value: str) -> StepOutcome:
        changed = self.selected.get(name) != value
        self.selected[name] = value
        return StepOutcome(reward=0.0, effective=changed)

    def _buy(self) -> StepOutcome:
        self.purchase = score_purchase(self.goal, self.product, self.selected)
        self.page = "done"
        score = self.purchase.score
        return StepOutcome(reward=score, terminated=True, success=score == 1.0,
                           info={"score": score, "purchase": {"product": self.product.id,
                                                              "options": dict(self.selected),
                                                              **self.purchase.to_dict()}})

    # -- pages -----------------------------------------------------------------------------
    @property
    def num_result_pages(self) -> int:
        return max(1, -(-len(self.results) // self.config.results_per_page))

    def page_results(self) -> list[Product]:
        """The products listed on the current results page."""
        start = self.result_page * self.config.results_per_page
        return self.results[start:start + self.config.results_per_page]

    def render_text(self) -> str:
        if self.goal is None:
            return "WebShop: call reset() to start an episode."
        body = {
            "search": self._render_search,
            "results": self._render_results,
            "item": self._render_item,
            "description": lambda: [f"Description of {self.product.id}:", self.product.description],
            "features": lambda: [f"Features of {self.product.id}:",
                                 *(f"- {f}" for f in self.product.features)],
            "done": self._render_done,
        }[self.page]()
        actions = self.valid_actions() if self.page != "search" else ["search[<your query>]"]
        footer = [f"Available actions: {', '.join(actions)}"] if actions else []
        return "\n".join([f"Instruction: {self.goal.instruction}", *body, *footer])

    def _render_search(self) -> list[str]:
        return ["[Search page] Type a query to search the shop."]

    def _render_results(self) -> list[str]:
        query = self.queries[-1]
        if not self.results:
            return [f'[Results] No products match "{query}".']
        lines = [f'[Results] "{query}": page {self.result_page + 1} of {self.num_result_pages} '
                 f"({len(self.results)} products)"]
        lines += [f"[{p.id}] {p.title} - ${p.price:.2f}" for p in self.page_results()]
        return lines

    def _render_item(self) -> list[str]:
        p = self.product
        lines = [f"[Item {p.id}] {p.title}", f"Price: ${p.price:.2f}"]
        for name, values in p.options.items():
            marked = [f"[{v}]*" if self.selected.get(name) == v else f"[{v}]" for v in values]
            lines.append(f"{name}: {' '.join(marked)}")
        chosen = ", ".join(f"{n}: {v}" for n, v in self.selected.items()) or "none"
        lines.append(f"Selected options: {chosen}")
        return lines

    def _render_done(self) -> list[str]:
        if self.purchase is None:
            return ["[Episode over]"]
        chosen = ", ".join(f"{n}: {v}" for n, v in self.selected.items()) or "no options"
        return [f"[Thank you for shopping] You bought {self.product.title} (${self.product.price:.2f}) "
                f"with {chosen}.", f"Score: {self.purchase.score:.3f}"]

    def render_rgb(self) -> np.ndarray:
        """The text page drawn on a fixed 960x720 canvas (same size every frame, for GIFs)."""
        try:
            from PIL import Image, ImageDraw, ImageFont
        except ImportError as exc:  # pillow is a dependency; this guards broken installs
            raise RuntimeError("render_rgb needs Pillow: pip install pillow") from exc
        width, height, line_h, margin = 960, 720, 18, 12
        lines = [wrapped for line in self.render_text().splitlines()
                 for wrapped in (textwrap.wrap(line, 120) or [""])]
        image = Image.new("RGB", (width, height), "white")
        draw = ImageDraw.Draw(image)
        font = ImageFont.load_default(size=14)
        for row, line in enumerate(lines[: (height - 2 * margin) // line_h]):
            draw.text((margin, margin + row * line_h), line, fill="black", font=font)
        return np.asarray(image, dtype=np.uint8)
