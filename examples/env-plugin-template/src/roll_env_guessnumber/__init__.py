"""Guess the number, a roll env plugin. Keep this file empty of imports: roll imports the package
whenever it loads the plugin's entry point, and that must stay cheap."""

__version__ = "0.1.0"
