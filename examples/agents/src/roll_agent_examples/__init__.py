"""Example agents for roll's agent gateway; the entry module (``plugin``) stays import-light."""

__version__ = "0.1.0"
