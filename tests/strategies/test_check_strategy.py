"""check_strategy: the built-in backends pass it, and a broken backend plugin is told what is wrong."""

from __future__ import annotations

import textwrap

import pytest

from roll_core.plugins import PluginManager
from roll_core.testing import StrategyCheckError, check_strategy


@pytest.mark.parametrize("name", ["hf_train", "hf_infer"])
def test_builtin_strategies_pass(name, roll_cache):
    report = check_strategy(name, missing=("torch",), cache_dir=roll_cache)
    assert report.ok and not report.notes, str(report)
    assert report.passed == ["registration", "entry module stays import-light", "install hint without torch",
                             "contract of its role", "works on the tiny model"]


BROKEN = '''
    import torch  # heavy at import time: breaks `roll plugins list` speed

    from roll_core import hookimpl
    from roll_core.strategies.base import TrainStrategy


    class Lazy(TrainStrategy):
        """Forgets from_worker_config and export_weights."""

        mini_batch_size = 1

        def compute_log_probs(self, batch, *, with_entropy=False):
            return None, None

        def train_step(self, batch, loss_fn):
            return {}

        def save_checkpoint(self, path):
            pass

        def load_checkpoint(self, path):
            pass


    @hookimpl
    def roll_register_strategies(register):
        register("lazy_train", "{module}:Lazy", role="train", requires=["lazy-backend>=1"])
'''


def test_a_broken_backend_gets_every_problem_listed(tmp_path, monkeypatch, roll_cache):
    module = "lazy_strategy_plugin"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(BROKEN.replace("{module}", module)))
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = PluginManager(autoload=False, extra_modules=[module]).registry
    report = check_strategy("lazy_train", missing=(module,), registry=registry, cache_dir=roll_cache,
                            raise_on_failure=False)
    failures = "\n".join(report.failures)
    assert "install hint without lazy_strategy_plugin: no `pip install` command" not in failures
    assert "leaves abstract methods unimplemented: ['export_weights']" in failures
    assert "works on the tiny model" in failures
    with pytest.raises(StrategyCheckError, match=r"check_strategy\(lazy_train\): \d+ passed, \d+ failed"):
        check_strategy("lazy_train", registry=registry, cache_dir=roll_cache, build=False)


def test_the_import_lightness_check_catches_a_heavy_entry_module(tmp_path, monkeypatch):
    from roll_core.testing.env_checks import check_import_light

    (tmp_path / "heavy_entry_mod.py").write_text("import torch\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(AssertionError, match="imported torch"):
        check_import_light("heavy_entry_mod")
