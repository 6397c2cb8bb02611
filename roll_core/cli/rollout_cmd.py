"""``roll rollout CONFIG [KEY=VALUE ...] [--policy P] [--batches N] [--dump FILE.jsonl] [--val]``.

The rollout pipeline alone, no training: the config's env managers play episodes and serve
batches, and every batch prints its throughput and env metrics. With the config's model as the
policy (the default, ROLL's ``llm_proxy.proxy_type: policy``) inference workers are started; with
``--policy random`` or ``scripted`` no model is loaded and no GPU backend is needed, so a ROLL
config written for GPUs rolls out on a laptop. Every batch also says, per tag, how many tokens a
reply took (mean, max, and how many were cut at the per-call cap). ``--dump`` writes every
trajectory (messages, each turn's prompt and response text, tool-call markup included, with their
token counts, rewards, metrics) as one JSON line, for inspection.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from roll_core.cli.config_cmd import add_config_arguments, load_from_args
from roll_core.errors import RollError


def register(subparsers) -> None:
    from roll_core.rollout.engine.turn_policies import TURN_POLICIES

    parser = subparsers.add_parser("rollout", help="roll out a config's envs without training")
    add_config_arguments(parser)
    parser.add_argument("--policy", choices=sorted(TURN_POLICIES), default=None,
                        help="who answers: the config's model (model/policy), or a model-free policy "
                             "(random, scripted: the env's solver); default: the env manager's llm_proxy")
    parser.add_argument("--batches", type=int, default=1, metavar="N", help="batches to collect (default 1)")
    parser.add_argument("--batch-size", type=int, default=None, metavar="N",
                        help="trajectories per batch (default: rollout_batch_size, or val_batch_size with --val)")
    parser.add_argument("--val", action="store_true", help="roll out val_env_manager (validation passes)")
    parser.add_argument("--dump", default=None, metavar="FILE.jsonl", help="write every trajectory as JSON lines")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="give up when one batch takes longer than S seconds (default: the config's rpc_timeout)")
    parser.add_argument("--infer-workers", type=int, default=1, metavar="N",
                        help="inference workers when the model is the policy (default 1)")
    parser.add_argument("--address", default=None, metavar="ADDR",
                        help="Ray cluster to join (default: RAY_ADDRESS, else a local cluster)")
    parser.set_defaults(func=cmd_rollout)


def cmd_rollout(args) -> int:
    import ray

    from roll_core.config import resolve
    from roll_core.pipeline.preflight import preflight
    from roll_core.rollout.engine.scheduler import RolloutScheduler, init_ray
    from roll_core.rollout.engine.spec_from_run import SECTIONS, batch_size_from_config, rollout_spec
    from roll_core.rollout.engine.turn_policies import TURN_POLICIES, check_policy
    from roll_core.workers.infer_group import start_generation

    mode = "val" if args.val else "train"
    config = load_from_args(args, resolve_plugins=False)
    section = getattr(config, SECTIONS[mode][0])
    policy = check_policy(args.policy or section.llm_proxy.proxy_type)
    needs_model = TURN_POLICIES[policy].needs_model
    # bind the envs, and the inference backend only when a model is loaded: a ROLL GPU config rolls
    # out with a model-free policy without its training backends installed
    run = resolve(config, roles=("actor_infer",) if needs_model else ())
    config = run.config
    spec = rollout_spec(run, mode, policy=policy)
    # before Ray: the envs build, their templates fill, their first prompts fit
    tokenizer = preflight(run, modes=(mode,), model_free=not needs_model, directories=("render_save_dir",))
    batch_size = args.batch_size or batch_size_from_config(config, mode)
    dump = open_dump(args.dump) if args.dump else None  # a bad path fails here, before anything starts

    started_ray = init_ray(**({"address": args.address} if args.address else {}))
    scheduler = generation = None
    try:
        t0 = time.perf_counter()
        if needs_model:
            generation = start_generation(
                run, num_workers=args.infer_workers, options={"num_cpus": 1},
                max_batch_size=max(config.max_running_requests // args.infer_workers, 1))
        scheduler = RolloutScheduler(spec, tokenizer, generate_scheduler=generation and generation.scheduler,
                                     batch_size=batch_size, batch_timeout_s=float(config.rpc_timeout),
                                     worker_env_vars={**config.system_envs, **section.system_envs} or None)
        who = f"the model {run.model_path('actor_infer', required=False)}" if needs_model \
            else policy
        print(f"roll rollout: {mode} env manager, {spec.num_env_groups} groups x {spec.group_size} envs "
              f"({spec.num_envs} envs on {spec.num_workers} workers), policy {who}, "
              f"{batch_size} trajectories per batch; started in {time.perf_counter() - t0:.1f} s", flush=True)
        for index in range(1, args.batches + 1):
            batch = scheduler.get_batch(batch_size, timeout=args.timeout)
            print(format_batch(index, args.batches, batch.metrics, spec.group_size, batch.trajectories), flush=True)
            if dump is not None:
                for traj in batch.trajectories:
                    dump.write(json.dumps(trajectory_record(traj, index)) + "\n")
    finally:
        if dump is not None:
            dump.close()
        if scheduler is not None:
            scheduler.shutdown()
        if generation is not None:
            generation.shutdown()
        if started_ray:
            ray.shutdown()
    if args.dump:
        print(f"trajectories written to {args.dump}")
    return 0


def open_dump(path: str) -> IO[str]:
    """The ``--dump`` file, its missing parent directories created; a clear error if it cannot be."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return target.open("w", encoding="utf-8")
    except OSError as exc:
        raise RollError(f"--dump {path}: cannot write the trajectories there ({exc.strerror or exc}); "
                        "choose a file in a writable directory.") from None


def format_batch(index: int, total: int, metrics: dict[str, float], group_size: int,
                 trajectories: Sequence[Any] = ()) -> str:
    """Two or more lines: throughput and lengths, the env metrics of each tag, the replies' token counts."""
    m = metrics
    n = int(m["rollout/trajectories"])
    lines = [
        f"batch {index}/{total}: {n} trajectories ({n // group_size} groups) in {m['time/get_batch']:.2f} s | "
        f"{m['rollout/trajectories_per_s']:.1f} traj/s | {m['rollout/env_steps_per_s']:.1f} env steps/s | "
        f"response tokens {m['rollout/response_length/mean']:.1f} | steps {m['rollout/num_steps/mean']:.2f} | "
        f"reward {m['rollout/episode_reward/mean']:.3f} | dropped {int(m['rollout/dropped_trajectories'])}"
    ]
    drops = {k.rsplit("/", 1)[-1]: int(v) for k, v in m.items() if k.startswith("rollout/dropped_trajectories/")}
    if drops:
        lines[0] += " (" + ", ".join(f"{k} {v}" for k, v in sorted(drops.items())) + ")"
    tags = sorted({k.split("/")[1] for k in m if k.startswith("env/")})
    for tag in tags:
        prefix = f"env/{tag}/"  # envs report success, validity, ...; agents what they return, plus calls
        values = " ".join(f"{k[len(prefix):]} {v:.3f}" for k, v in m.items() if k.startswith(prefix))
        lines.append(f"  env/{tag}: {values}")
    return "\n".join(lines + reply_lines(trajectories))


def reply_lines(trajectories: Sequence[Any]) -> list[str]:
    """Per tag, what one reply (an env turn, an agent's model call) costs in tokens, end-of-turn
    included, and how many were cut at the per-call cap (``max_tokens_per_step``)."""
    by_tag: dict[str, list[Any]] = {}
    for traj in trajectories:
        by_tag.setdefault(traj.tag, []).extend(traj.turns)
    lines = []
    for tag, turns in sorted(by_tag.items()):
        if not turns:
            continue
        tokens = [len(turn.response_ids) for turn in turns]
        cut = sum(turn.finish_reason == "length" for turn in turns)
        lines.append(f"  replies/{tag}: {len(turns)} replies, tokens min {min(tokens)} mean "
                     f"{sum(tokens) / len(tokens):.1f} max {max(tokens)} | cut at the cap {cut}")
    return lines


def trajectory_record(traj: Any, batch: int) -> dict[str, Any]:
    """One JSON-able line of ``--dump``: the conversation, every turn, rewards and metrics."""
    return {
        "batch": batch,
        "traj_id": traj.traj_id,
        "traj_group_id": traj.traj_group_id,
        "tag": traj.tag,
        "group_id": traj.group_id,
        "episode_id": traj.episode_id,
        "member": traj.member,
        "seed": traj.seed,
        "episode_reward": traj.episode_reward,
        "metrics": traj.metrics,
        "end_reason": traj.end_reason,
        "num_steps": traj.num_steps,
        "policy_version": [traj.min_version, traj.max_version],
        "frames": traj.frames_path,
        "messages": traj.messages,
        "turns": [
            {"prompt": t.prompt_text, "response": t.response_text, "reward": t.reward, "metrics": t.metrics,
             "finish_reason": t.finish_reason, "version": t.version, "prompt_tokens": len(t.prompt_ids),
             "response_tokens": len(t.response_ids)}
            for t in traj.turns
        ],
    }


if __name__ == "__main__":  # pragma: no cover
    from roll_core.cli import main

    sys.exit(main(["rollout", *sys.argv[1:]]))
