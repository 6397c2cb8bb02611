"""``roll examples list | copy [NAME ...] [--to DIR]``: the example configs shipped with roll-core.

``copy`` writes them to ``DIR/examples/`` (default: the current directory), so the README's
commands (``roll run examples/frozen_lake/grpo.yaml``) work there as they do in a clone.
"""

from __future__ import annotations

from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser("examples", help="list or copy roll's example configs (and the env template)")
    sub = parser.add_subparsers(dest="examples_command", metavar="ACTION", required=True)
    p_list = sub.add_parser("list", help="the examples, their configs and the plugins they need")
    p_list.set_defaults(func=cmd_list)
    p_copy = sub.add_parser("copy", help="write examples to DIR/examples/ (all of them by default)")
    p_copy.add_argument("names", nargs="*", metavar="NAME", help="examples to copy (default: all)")
    p_copy.add_argument("--to", default=".", metavar="DIR", help="directory to copy into (default: .)")
    p_copy.add_argument("--force", action="store_true", help="overwrite examples already there")
    p_copy.set_defaults(func=cmd_copy)


def cmd_list(args) -> int:
    from roll_core.examples import examples_dir, list_examples

    root = examples_dir()
    for example in list_examples(root):
        print(f"{example.name}: {example.description}")
        for config, packages in example.configs:
            needs = f"  (needs: pip install {' '.join(packages)})" if packages else ""
            print(f"    examples/{config}{needs}")
    print(f"\n(from {root}; `roll examples copy [NAME ...]` writes them to ./examples/)")
    return 0


def cmd_copy(args) -> int:
    from roll_core.examples import copy_examples, list_examples

    dest = Path(args.to)
    targets = copy_examples(args.names, dest, force=args.force)
    by_name = {e.name: e for e in list_examples()}
    for target in targets:
        example = by_name[target.name]
        print(f"wrote {target}/")
        if example.configs:
            config, packages = example.configs[0]
            install = f"pip install {' '.join(packages)} && " if packages else ""
            print(f"    {install}roll run examples/{config}")
        elif (target / "pyproject.toml").is_file():
            print(f"    pip install -e {target}")
    if dest != Path("."):
        print(f"(run these from {dest})")
    return 0
