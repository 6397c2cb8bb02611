"""Reading a config: YAML, Hydra ``defaults:`` composition, command-line overrides, interpolation.

The steps, in order:

1. Read the file. A file with a ``defaults:`` list is composed by hydra-core's compose API exactly
   as ROLL's launch scripts do (``- ../config/traj_envs@_here_``, ``_self_``); any other file is
   read by OmegaConf alone (hydra is not even imported). A ``hydra:`` block is ignored.
2. Apply overrides ``a.b.c=value`` (values parsed as YAML: ``tags=[A,B]``, ``lr=1e-6``). Overriding
   a key that is neither in the file nor in the schema is an error with a suggestion; ``+a.b=v``
   adds a key, ``~a.b`` removes one.
3. Resolve ``${...}`` interpolations (and the ``now`` resolver ROLL configs use).
4. Drop *variables*: ROLL configs keep helper keys at the top level (``max_actions_per_traj``,
   ``custom_env``, ``deepspeed_zero2`` ...) only to interpolate them. An unknown top-level key is
   such a variable when something interpolates it, or when it comes from an included file and is
   not a near-miss of a config key (``rollout_batch_sise`` in an included file is a typo, and an
   error); any other unknown key is left for validation to report as a typo.
5. Validate (:func:`roll_core.config.pipeline.validate_config`).

Every YAML file read (the config and the files its ``defaults:`` list includes) is measured first:
a file whose anchors and aliases (``&a`` / ``*a``) would expand to more than
:data:`MAX_CONFIG_NODES` values ("billion laughs") is refused before anything expands it.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from roll_core.config.pipeline import PIPELINES, PipelineConfig, all_top_level_keys, validate_config
from roll_core.errors import ConfigError, close_matches, did_you_mean
from roll_core.validation import format_path, is_model, problems_message, unwrap

#: keys of a config file that are instructions to the loader, never config values
LOADER_KEYS = ("defaults", "hydra")
#: most values (mappings, lists, scalars) one YAML file may expand to, aliases counted at every use;
#: ROLL's largest configs hold a few hundred
MAX_CONFIG_NODES = 200_000
#: how close an unknown top-level key of an included file must be to a config key to count as its typo
TYPO_CUTOFF = 0.85
#: variables of ROLL's shared env files that look like typos of config keys but are not
#: (``custom_env`` holds the presets that configs pick into ``custom_envs`` by interpolation)
ROLL_VARIABLES = frozenset({"custom_env"})

_OVERRIDE = re.compile(r"^(?P<op>\+\+|\+|~)?(?P<key>[A-Za-z_][\w\-]*(?:\.[\w\-]+)*)(?:=(?P<value>.*))?$", re.S)
#: ``${path.to.node}`` (not resolver calls such as ``${oc.env:X}``); group 1 is the top-level key
_NODE_INTERPOLATION = re.compile(r"\$\{\s*([A-Za-z_][\w\-]*)(?:\.[\w\-]+|\[[^\]]*\])*\s*\}")


def load_config(path: str | os.PathLike, overrides: Sequence[str] = (), *,
                config_name: str | None = None) -> PipelineConfig:
    """Load, compose, override, interpolate and validate a config file.

    ``path`` is a YAML file, or a directory with ``config_name`` (ROLL's ``--config_path`` /
    ``--config_name``). Returns an :class:`~roll_core.config.AgenticConfig` or
    :class:`~roll_core.config.RLVRConfig`; raises :class:`ConfigError` with the YAML path of every
    problem.
    """
    data, source = load_config_data(path, overrides, config_name=config_name)
    return validate_config(data, source=source)


def load_config_data(path: str | os.PathLike, overrides: Sequence[str] = (), *,
                     config_name: str | None = None) -> tuple[dict[str, Any], str]:
    """Steps 1-4 of the module docstring: plain data ready for validation, and its source name."""
    file, source = config_file(path, config_name)
    primary = _read_yaml(file, source)
    if "defaults" in primary:
        _check_included(file, primary)
        cfg = _compose(file, source)
    else:
        cfg = primary
    for key in LOADER_KEYS:
        cfg.pop(key, None)
    own_keys = {str(k) for k in primary} | apply_overrides(cfg, overrides)
    referenced = set(_referenced_keys(OmegaConf.to_container(cfg, resolve=False)))
    data = _resolve_interpolations(cfg, source)
    known = all_top_level_keys()
    typos = [k for k in data if k not in known and k not in referenced and k not in own_keys
             and k not in ROLL_VARIABLES and close_matches(k, known, n=1, cutoff=TYPO_CUTOFF)]
    if typos:
        raise ConfigError(problems_message(
            [f"{k}: unknown key in a file included through the defaults: list (nothing interpolates it).{did_you_mean(k, known)}"
             for k in typos], source))
    variables = {k for k in data if k not in known and (k in referenced or k not in own_keys)}
    return {k: v for k, v in data.items() if k not in variables}, source


def config_file(path: str | os.PathLike, config_name: str | None = None) -> tuple[Path, str]:
    """The YAML file meant by ``path`` (+ ``config_name``), and how to name it in messages."""
    base = Path(path)
    if config_name is not None:
        if not base.is_dir():
            raise ConfigError(f"--config-name needs a config directory, but {str(base)!r} is not a directory.")
        base = base / config_name
    candidates = [base] if base.suffix in (".yaml", ".yml") else [base, base.with_name(base.name + ".yaml")]
    for candidate in candidates:
        if candidate.is_file():
            return candidate, str(candidate)
    if base.is_dir():
        names = sorted(p.stem for p in base.glob("*.yaml"))
        raise ConfigError(
            f"{str(base)!r} is a directory; name the config in it with --config-name "
            f"(configs there: {', '.join(names) or 'none'})."
        )
    siblings = sorted(p.stem for p in base.parent.glob("*.yaml")) if base.parent.is_dir() else []
    hint = "".join(f" Did you mean {m!r}?" for m in close_matches(base.stem, siblings, n=1))
    raise ConfigError(f"Config file {str(base)!r} not found.{hint}")


# -- reading and composing ------------------------------------------------------------------------

def _read_yaml(file: Path, source: str) -> DictConfig:
    _check_size(file, source)
    try:
        cfg = OmegaConf.load(file)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source} is not valid YAML: {_yaml_problem(exc)}.") from None
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{source}: {_first_line(exc)} (at {exc.full_key or 'top level'}).") from None
    if not isinstance(cfg, DictConfig):
        raise ConfigError(f"{source} must hold a mapping of config keys at the top level, not a list.")
    return cfg


def _check_size(file: Path, source: str) -> None:
    """Refuse a YAML file that would expand to more than :data:`MAX_CONFIG_NODES` values.

    PyYAML composes aliases as shared nodes (linear), while OmegaConf copies every use, so nine
    levels of nine aliases become 9**9 values. Counting with one memo per node is linear in the
    file, whatever its aliases.
    """
    try:
        root = yaml.compose(file.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source} is not valid YAML: {_yaml_problem(exc)}.") from None
    except RecursionError:
        raise ConfigError(f"{source} is nested too deeply to be a config.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"Cannot read {source}: {exc}.") from None
    sizes: dict[int, int] = {}
    order, stack = [], [root] if root is not None else []
    while stack:  # children before parents, without recursion
        node = stack.pop()
        if id(node) in sizes:
            continue
        sizes[id(node)] = 0
        order.append(node)
        stack.extend(_children(node))
    for node in reversed(order):
        sizes[id(node)] = min(1 + sum(sizes[id(c)] for c in _children(node)), MAX_CONFIG_NODES + 1)
    if root is not None and sizes[id(root)] > MAX_CONFIG_NODES:
        raise ConfigError(
            f"{source} expands to more than {MAX_CONFIG_NODES:,} values through its YAML anchors and aliases "
            "(&name / *name); roll refuses to expand it (a 'billion laughs' file?). Write the values out, or "
            "use ${...} interpolation."
        )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_included(file: Path, primary: DictConfig, seen: set[Path] | None = None) -> None:
    """:func:`_check_size` for the files a ``defaults:`` list includes (``group/name``, ``../dir/name@pkg``)."""
    seen = set() if seen is None else seen
    entries = primary.get("defaults") or []
    for entry in entries if isinstance(entries, ListConfig) else []:
        if isinstance(entry, str):
            names = [entry]
        elif isinstance(entry, DictConfig):
            names = [f"{str(k).split()[-1]}/{v}" for k, v in entry.items() if isinstance(v, str)]
        else:
            continue
        for name in names:
            name = name.split("@")[0].strip()
            if not name or name == "_self_":
                continue
            included = (file.parent / f"{name}.yaml").resolve()
            if included in seen or not included.is_file():
                continue  # Hydra reports what it cannot find
            seen.add(included)
            _check_size(included, str(included))
            try:
                nested = OmegaConf.load(included)
            except (yaml.YAMLError, OmegaConfBaseException):
                continue  # Hydra reports it with its own context
            if isinstance(nested, DictConfig) and "defaults" in nested:
                _check_included(included, nested, seen)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark else problem


def _compose(file: Path, source: str) -> DictConfig:
    """Compose ``file`` with its ``defaults:`` list through Hydra, as ROLL's launchers do."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    if file.suffix != ".yaml":
        raise ConfigError(f"{source} has a defaults: list, which Hydra only composes from .yaml files; rename it.")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*_self_.*")  # Hydra's note on the default order
            with initialize_config_dir(config_dir=str(file.parent.resolve()), version_base=None, job_name="roll"):
                cfg = compose(config_name=file.stem)
    except yaml.YAMLError as exc:
        raise ConfigError(f"A file included by {source} is not valid YAML: {_yaml_problem(exc)}.") from None
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(f"Cannot compose {source} from its defaults list: {_first_line(exc)}") from None
    OmegaConf.set_struct(cfg, False)
    OmegaConf.set_readonly(cfg, False)
    return cfg


def _first_line(exc: Exception) -> str:
    text = getattr(exc, "msg", None) or str(exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


# -- overrides ------------------------------------------------------------------------------------

def apply_overrides(cfg: DictConfig, overrides: Sequence[str]) -> set[str]:
    """Apply command-line overrides to ``cfg`` in place; returns the top-level keys they touched."""
    touched: set[str] = set()
    for item in overrides:
        match = _OVERRIDE.match(item.strip())
        if not match or (match["op"] != "~" and match["value"] is None):
            raise ConfigError(
                f"Cannot read the override {item!r}: write key.path=value (+key.path=value adds a key that is "
                "not in the config, ~key.path removes one)."
            )
        op, key = match["op"], match["key"]
        parts = key.split(".")
        if op == "~":
            _remove(cfg, parts, item)
        else:
            _materialize(cfg, parts[:-1])
            if op is None and not _override_target_known(cfg, parts):
                raise ConfigError(_unknown_override_message(cfg, parts, match["value"]))
            try:
                value = OmegaConf.from_dotlist([f"v={match['value']}"])._get_node("v")
                OmegaConf.update(cfg, key, value, merge=False, force_add=True)
            except yaml.YAMLError as exc:
                raise ConfigError(
                    f"Cannot read the value of the override {item!r}: it is not valid YAML "
                    f"({_yaml_problem(exc).replace('line 1, ', '')}). Quote it to pass a string "
                    f"({key}='{match['value']}'), or close its brackets."
                ) from None
            except OmegaConfBaseException as exc:
                raise ConfigError(f"Cannot apply the override {item!r}: {_first_line(exc)}.") from None
        touched.add(parts[0])
    return touched


def _materialize(cfg: DictConfig, parts: list[str]) -> None:
    """Replace interpolated sections along ``parts`` by copies, so overrides edit what users see.

    ``custom_envs: {FrozenLake: ${custom_env.FrozenLake}}`` is ROLL's idiom; without this,
    ``custom_envs.FrozenLake.max_steps=3`` would replace the whole entry by ``{max_steps: 3}``.
    """
    node: Any = cfg
    for part in parts:
        if isinstance(node, DictConfig) and part in node and OmegaConf.is_interpolation(node, part):
            try:
                target = node[part]
            except OmegaConfBaseException:
                return  # reported when interpolations are resolved
            if not isinstance(target, DictConfig | ListConfig):
                return
            node[part] = OmegaConf.create(OmegaConf.to_container(target, resolve=False))
        node = _child(node, part)
        if node is _ABSENT:
            return


def _child(node: Any, part: str) -> Any:
    """``node[part]`` for a DictConfig key or a ListConfig index, or a sentinel when absent."""
    if isinstance(node, DictConfig) and part in node:
        return node._get_node(part)
    if isinstance(node, ListConfig) and part.isdigit() and int(part) < len(node):
        return node._get_node(int(part))
    return _ABSENT


_ABSENT = object()


def _schema_children(types: list[Any], part: str) -> list[Any]:
    """Types reached from ``types`` through the *schema field* ``part`` (dict keys do not count)."""
    out = []
    for tp in types:
        tp = unwrap(tp)
        if is_model(tp) and part in tp.model_fields:
            out.append(tp.model_fields[part].annotation)
    return out


def _typed_children(types: list[Any], part: str) -> list[Any]:
    """Types reached through ``part`` when it exists in the YAML (fields, dict keys, list items)."""
    out = _schema_children(types, part)
    for tp in types:
        tp = unwrap(tp)
        origin, args = get_origin(tp), get_args(tp)
        if origin is dict and len(args) == 2:
            out.append(args[1])
        elif origin is list and args and part.isdigit():
            out.append(args[0])
    return out


def _override_target_known(cfg: DictConfig, parts: list[str]) -> bool:
    """Whether ``parts`` names a key of the YAML or a field of the schema (either pipeline).

    Keys inside an existing ``custom_envs.<tag>.env_config`` count as known: their schema is the
    env plugin's ``config_model``, which only ``resolve`` sees (it reports a typo there with the
    env's fields); the loader never looks at plugins.
    """
    if len(parts) >= 4 and parts[0] == "custom_envs" and parts[2] == "env_config" and \
            _child(_child(cfg, "custom_envs"), parts[1]) is not _ABSENT:
        return True
    node: Any = cfg
    types: list[Any] = list(PIPELINES.values())
    for part in parts:
        child = _child(node, part) if node is not _ABSENT else _ABSENT
        if child is not _ABSENT:
            node, types = child, _typed_children(types, part)
            continue
        types = _schema_children(types, part)
        if not types:
            return False
        node = _ABSENT
    return True


def _unknown_override_message(cfg: DictConfig, parts: list[str], value: str) -> str:
    node: Any = cfg
    types: list[Any] = list(PIPELINES.values())
    depth = 0
    while depth < len(parts) - 1:  # find the first part neither the YAML nor the schema has
        part = parts[depth]
        child = _child(node, part) if node is not _ABSENT else _ABSENT
        nxt = _typed_children(types, part) if child is not _ABSENT else _schema_children(types, part)
        if child is _ABSENT and not nxt:
            break
        node, types, depth = child, nxt, depth + 1
    choices = {str(k) for k in node.keys()} if isinstance(node, DictConfig) else set()
    for tp in types:
        if is_model(unwrap(tp)):
            choices.update(unwrap(tp).model_fields)
    key = ".".join(parts)
    where = f" in {'.'.join(parts[:depth])}" if depth else ""
    hits = close_matches(parts[depth], sorted(choices))
    suggestion = f" Did you mean {' or '.join(repr('.'.join(parts[:depth] + [h])) for h in hits)}?" if hits else ""
    return (
        f"Cannot override {key!r}: there is no key {parts[depth]!r}{where} in the config or its schema."
        f"{suggestion} To add a new key on purpose, write +{key}={value}."
    )


def _remove(cfg: DictConfig, parts: list[str], item: str) -> None:
    parent: Any = cfg
    for part in parts[:-1]:
        parent = _child(parent, part)
        if parent is _ABSENT:
            break
    if parent is _ABSENT or _child(parent, parts[-1]) is _ABSENT:
        raise ConfigError(f"Cannot remove {'.'.join(parts)!r} ({item}): the config has no such key.")
    if isinstance(parent, ListConfig):
        del parent[int(parts[-1])]
    else:
        del parent[parts[-1]]


# -- interpolation --------------------------------------------------------------------------------

def _referenced_keys(value: Any) -> Iterator[str]:
    """Top-level keys named by node interpolations anywhere in unresolved config data."""
    if isinstance(value, str):
        yield from _NODE_INTERPOLATION.findall(value)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _referenced_keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from _referenced_keys(item)


def _resolve_interpolations(cfg: DictConfig, source: str) -> dict[str, Any]:
    if not OmegaConf.has_resolver("now"):  # Hydra's resolver; ROLL configs use it without Hydra too
        OmegaConf.register_new_resolver("now", lambda pattern: datetime.now().strftime(pattern), use_cache=True)
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as exc:
        where = format_path(str(exc.full_key).split(".")) if exc.full_key else "the top level"
        raise ConfigError(f"Cannot resolve {where} in {source}: {_first_line(exc)}.") from None
