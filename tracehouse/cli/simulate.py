"""``tracehouse simulate``: argument parsing over :func:`tracehouse.simulate.simulate_run`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tracehouse.cli.arguments import EXIT_OK, EXIT_USAGE, add_parallel_sizes, path

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``tracehouse simulate`` on the main parser's subcommands."""
    simulate = sub.add_parser(
        "simulate",
        help="write a synthetic Megatron-LM run as real-format Kineto traces",
        description=(
            "Simulate a Megatron-LM training run (megatron-core's 1F1B or interleaved "
            "schedule, TP/PP/DP/CP/EP groups, NCCL collectives) and write it as the Megatron "
            "patch lays it out: DIR/topology.json, DIR/iteration_N/rank_XXXX_iter_N.pt.trace"
            ".json.gz and DIR/ground_truth.json (what was injected, the analytical bubble)."
        ),
    )
    add_parallel_sizes(
        simulate, ("--tp", "--pp", "--dp", "--cp", "--ep", "--etp", "--vpp"),
        defaults={"--vpp": 1},
        helps={"--ep": "expert-parallel size; > 1 makes the MLPs MoE layers (default 1)",
               "--vpp": "model chunks per pipeline rank (virtual pipeline, default 1)"})
    simulate.add_argument("--microbatches", type=int, required=True, metavar="M")
    simulate.add_argument("--iterations", type=int, required=True, metavar="K",
                          help="traced iterations (one file per rank per iteration)")
    simulate.add_argument("--schedule", choices=("1f1b", "interleaved"), default=None,
                          help="pipeline schedule (default: interleaved when --vpp > 1)")
    simulate.add_argument("--layers", type=int, default=32, metavar="L",
                          help="transformer layers (default 32; divisible by pp*vpp)")
    simulate.add_argument("--hidden", type=int, default=4096, metavar="H",
                          help="hidden size (default 4096)")
    simulate.add_argument("--heads", type=int, default=32, metavar="N",
                          help="attention heads (default 32)")
    simulate.add_argument("--seq-length", type=int, default=4096, metavar="S",
                          help="sequence length (default 4096)")
    simulate.add_argument("--sequence-parallel", action="store_true",
                          help="Megatron sequence parallelism (all-gather/reduce-scatter)")
    simulate.add_argument("--record-shapes", action="store_true",
                          help="write the transformer ops' shapes (Input Dims, Input type, "
                               "Concrete Inputs), as the profiler's record_shapes does: the "
                               "warehouse then gives each GEMM and attention kernel its FLOPs")
    simulate.add_argument("--straggler", action="extend", nargs="+", default=[],
                          metavar="RANK:FACTOR",
                          help="slow ranks' compute kernels, e.g. 5:1.5 (several allowed)")
    simulate.add_argument("--slow-group", action="extend", nargs="+", default=[],
                          metavar="KIND:FACTOR",
                          help="slow every transfer in one kind of process group, e.g. dp:3 "
                               "(a slow link; kinds: tp, cp, ep, etp, dp, pp, embedding, "
                               "world; several allowed)")
    simulate.add_argument("--no-overlap-grad-reduce", action="store_true",
                          help="Megatron without --overlap-grad-reduce: the data-parallel "
                               "gradient reduce-scatters run after the last backward, exposed")
    simulate.add_argument("--launch-overhead-us", type=float, default=0.0, metavar="X",
                          help="host microseconds added to every kernel launch call (a "
                               "launch-bound run; default 0)")
    simulate.add_argument("--slow-gemm", type=float, default=1.0, metavar="FACTOR",
                          help="every GEMM kernel FACTOR times longer (a card at a lower "
                               "clock, fp32 GEMMs): GEMMs run further below the roof; "
                               "with --record-shapes the warehouse can tell (default 1)")
    simulate.add_argument("--recompute-granularity", choices=("full", "selective"),
                          default=None,
                          help="Megatron activation recomputation: full re-runs each "
                               "checkpointed layer's forward before its backward, selective "
                               "only the core attention (default: none)")
    simulate.add_argument("--recompute-num-layers", type=int, default=1, metavar="N",
                          help="with full recompute, layers per checkpoint (Megatron's "
                               "--recompute-method uniform; default 1)")
    simulate.add_argument("--clock-skew-us", type=float, default=0.0, metavar="X",
                          help="largest per-node clock offset in microseconds (default 0)")
    simulate.add_argument("--gpus-per-node", type=int, default=8, metavar="G",
                          help="ranks per node: rank r runs on node r // G (default 8)")
    simulate.add_argument("--seed", type=int, default=0, metavar="S",
                          help="seed of jitter and clock offsets (default 0)")
    simulate.add_argument("--first-iteration", type=int, default=1, metavar="N",
                          help="number of the first traced iteration (default 1)")
    simulate.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                          help="worker processes writing traces (default: CPUs, at most 8)")
    simulate.add_argument("--out", type=path, required=True, metavar="DIR",
                          help="folder for the run (created)")
    simulate.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    simulate.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``tracehouse simulate``."""
    from tracehouse.simulate import SimConfig, parse_slow_group, parse_straggler, simulate_run

    try:
        stragglers = tuple(parse_straggler(text) for text in args.straggler)
        slow_groups = tuple(parse_slow_group(text) for text in args.slow_group)
        schedule = args.schedule or ("interleaved" if args.vpp > 1 else "1f1b")
        config = SimConfig(
            tp=args.tp, pp=args.pp, dp=args.dp, cp=args.cp, ep=args.ep, etp=args.etp,
            vpp=args.vpp, microbatches=args.microbatches, iterations=args.iterations,
            schedule=schedule, layers=args.layers, hidden=args.hidden, heads=args.heads,
            seq_length=args.seq_length, sequence_parallel=args.sequence_parallel,
            stragglers=stragglers, clock_skew_us=args.clock_skew_us,
            gpus_per_node=args.gpus_per_node, seed=args.seed,
            first_iteration=args.first_iteration, record_shapes=args.record_shapes,
            slow_groups=slow_groups, overlap_grad_reduce=not args.no_overlap_grad_reduce,
            launch_overhead_us=args.launch_overhead_us, slow_gemm=args.slow_gemm,
            recompute_granularity=args.recompute_granularity,
            recompute_num_layers=args.recompute_num_layers,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.jobs is not None and args.jobs < 1:
        print("error: -j/--jobs must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    result = simulate_run(config, args.out, jobs=args.jobs, progress=not args.quiet)
    print(
        f"simulated {config.world} ranks x {config.iterations} iteration(s) "
        f"({result.events:,} events) into {result.out_dir} in {result.seconds:.1f} s; "
        f"ground truth: {result.ground_truth_path}",
        file=sys.stderr,
    )
    return EXIT_OK
