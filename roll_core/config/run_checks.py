"""What a training run must satisfy beyond its values, checked when it is resolved, before Ray.

Validation judges the values (``max_steps: -1``, a schedule without its arguments); these checks
need the resolved run or the files its config names. Each would otherwise fail only after Ray has
started, in the driver's start-up or inside a worker, so ``roll config show`` and ``roll run``
refuse them first, with the YAML path:

* RLVR: ``actor_train.data_args.file_name`` is set, every data file exists (the validation files
  too when the run validates), and the prompt template is one roll knows;
* placement: each role's ``device_mapping``, ``world_size`` and tensor-parallel size agree (the
  pure part of placement, :func:`roll_core.distributed.layout.build_layout`);
* agentic: the train rollout's spec (and the validation rollout's when the run validates) builds:
  the ``llm_proxy`` policy, env-manager sizes, per-tag settings
  (:func:`roll_core.rollout.engine.spec_from_run.rollout_spec`).

What needs the machine beyond reading the config's files (the model and its tokenizer, each env's
first prompt, writable output directories) is :mod:`roll_core.pipeline.preflight`'s: also before
Ray, in ``roll run``. What depends on the cluster (whether it has GPUs) is checked at placement.
"""

from __future__ import annotations

from typing import Any

from roll_core.errors import ConfigError


def check_training_run(run: Any) -> None:
    """Raise :class:`ConfigError` for the first problem of the module docstring's list."""
    from roll_core.config.pipeline import AgenticConfig, RLVRConfig

    config = run.config
    if isinstance(config, RLVRConfig):
        check_rlvr_data(config)
    check_layout(run)
    if isinstance(config, AgenticConfig):
        check_rollout_specs(run)


def check_rlvr_data(config: Any) -> None:
    from roll_core.data.prompts import renderer, resolve_path
    from roll_core.pipeline.rlvr_pipeline import validation_files

    data_args = config.actor_train.data_args
    if data_args is None or not data_args.file_name:
        raise ConfigError("actor_train.data_args.file_name is not set: the RLVR pipeline trains on prompts from "
                          "JSON-lines files (one object per line with a prompt or messages column).")
    #: (key of the files, the files, the data_args that holds their template)
    named = [("actor_train.data_args.file_name", data_args.file_name, data_args)]
    val_files, val_args = validation_files(config)
    if config.eval_steps > 0 and val_files:
        from_validation = config.validation is not None and val_args is config.validation.data_args
        key = "validation.data_args.file_name" if from_validation else "actor_train.data_args.eval_file_name"
        named.append((key, val_files, val_args))
    for key, files, args in named:
        for path in [files] if isinstance(files, str) else list(files):
            try:
                resolve_path(path)
            except ConfigError as exc:
                raise ConfigError(f"{key}: {exc}") from None
        section = key.rsplit(".", 1)[0]
        renderer(config.global_template or args.template,
                 "global_template" if config.global_template else f"{section}.template")


def check_layout(run: Any) -> None:
    from roll_core.distributed.layout import build_layout

    build_layout(run.config, [*run.train_roles, "actor_infer"], on_gpus=False)


def check_rollout_specs(run: Any) -> None:
    from roll_core.rollout.engine.spec_from_run import rollout_spec

    rollout_spec(run, "train")
    if run.config.eval_steps > 0:
        rollout_spec(run, "val")
