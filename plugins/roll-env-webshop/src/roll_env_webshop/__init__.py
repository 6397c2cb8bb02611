"""WebShop for roll. The env lives in :mod:`roll_env_webshop.env`; this package's import stays
empty so that loading the plugin entry point reads no catalogue and imports no numpy or BM25."""

__version__ = "0.1.0"
