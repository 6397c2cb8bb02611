"""roll plugin entry point: registers the ``webshop`` env (lazily, by import path)."""

from roll_core.hookspecs import hookimpl


@hookimpl
def roll_register_envs(register):
    register(
        "webshop",
        "roll_env_webshop.env:WebShopEnv",
        tags=["WebShop", "WebShopEnv"],
        description="Shop for the product an instruction describes: search, click through pages, buy",
        requires=["roll-env-webshop", "bm25s>=0.3"],
    )
