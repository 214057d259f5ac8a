"""``tracehouse commtrace`` argument parsing: a thin layer over :mod:`tracehouse.commtrace.run`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tracehouse.cli.arguments import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_parallel_sizes,
    path,
    positive,
    rank_list,
)

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``tracehouse commtrace`` on the main parser's subcommands."""
    from tracehouse.commtrace.run import MODEL_PRESETS

    parser = sub.add_parser(
        "commtrace",
        help="log every collective of a Megatron layout per rank, without GPUs",
        description=(
            "Run one real megatron-core training step per rank on the meta device under "
            "torch's fake process group (ranks run alone, in parallel processes) and write "
            "every collective and point-to-point call per rank as Genstack's "
            "comm_log_rank_<r>.json, plus config.json, summary.json and topology.json. "
            "`tracehouse ingest DIR` loads the logs into comm_log_events. Needs the "
            "[megatron] extra."),
    )
    add_parallel_sizes(
        parser, ("--tp", "--pp", "--dp", "--cp", "--ep", "--etp", "--vpp"),
        helps={"--cp": "context-parallel size",
               "--ep": "expert-parallel size (MoE: not supported yet)",
               "--vpp": "virtual pipeline size (interleaved 1F1B)"})
    parser.add_argument("--model", choices=sorted(MODEL_PRESETS), default=None,
                        help="GPT preset (Genstack's); --layers/--hidden/--heads/--seq "
                             "override its sizes")
    for name, text in (("--layers", "transformer layers"), ("--hidden", "hidden size"),
                       ("--heads", "attention heads"), ("--seq", "sequence length"),
                       ("--vocab", "tokenizer vocabulary (default GPT-2's 50257; padded as "
                                   "Megatron pads it)"),
                       ("--ffn-hidden", "MLP hidden size (default 4 x hidden)"),
                       ("--num-experts", "MoE experts: rejected for now (routing is "
                                         "data-dependent; meta tensors hold no data)"),
                       ("--bucket-size", "DDP gradient bucket size in elements")):
        parser.add_argument(name, type=int, default=None, metavar="N", help=text)
    parser.add_argument("--vocab-divisible-by", type=int, default=128, metavar="N",
                        help="Megatron's --make-vocab-size-divisible-by (default 128)")
    parser.add_argument("--microbatches", type=int, default=4, metavar="M",
                        help="microbatches per step (default 4)")
    parser.add_argument("--micro-batch-size", type=int, default=1, metavar="N",
                        help="sequences per microbatch (default 1)")
    parser.add_argument("--sequence-parallel", action="store_true",
                        help="Megatron's sequence parallelism (needs --tp > 1)")
    parser.add_argument("--distributed-optimizer", action="store_true",
                        help="shard the optimizer (reduce-scatter grads, all-gather params)")
    parser.add_argument("--overlap-grad-reduce", action="store_true",
                        help="DDP's overlapped, bucketed gradient reduction")
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32",
                        help="parameter and activation dtype (default fp32, as Genstack)")
    parser.add_argument("--no-training-loop", action="store_true",
                        help="only megatron-core's collectives: leave out the ones Megatron-LM's "
                             "training loop and pretrain_gpt.py add (start-up barrier and "
                             "all-reduce, flag broadcast, batch broadcasts, loss all-reduce)")
    parser.add_argument("--order", default="tp-cp-ep-dp-pp", metavar="ORDER",
                        help="rank order, fastest first (default tp-cp-ep-dp-pp)")
    parser.add_argument("--ranks", type=rank_list, default=None, metavar="LIST",
                        help="trace only these ranks (e.g. 0,8-15); default all")
    parser.add_argument("-j", "--jobs", type=positive, default=None, metavar="N",
                        help="ranks traced at once (default: CPU count)")
    parser.add_argument("--out", type=path, required=True, metavar="DIR",
                        help="folder for the logs (created)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no per-rank progress")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``tracehouse commtrace``."""
    from tracehouse.commtrace.run import CommTraceConfig, run_commtrace

    if args.model is None and None in (args.layers, args.hidden, args.heads, args.seq):
        args.model = "small"
    config = CommTraceConfig(
        tp=args.tp, pp=args.pp, dp=args.dp, cp=args.cp, ep=args.ep, etp=args.etp,
        vpp=args.vpp, model=args.model, layers=args.layers, hidden=args.hidden,
        heads=args.heads, seq=args.seq, vocab=args.vocab or 50257,
        vocab_divisible_by=args.vocab_divisible_by, ffn_hidden=args.ffn_hidden,
        num_experts=args.num_experts, microbatches=args.microbatches,
        micro_batch_size=args.micro_batch_size, sequence_parallel=args.sequence_parallel,
        distributed_optimizer=args.distributed_optimizer,
        overlap_grad_reduce=args.overlap_grad_reduce, bucket_size=args.bucket_size,
        dtype=args.dtype, emulate_training_loop=not args.no_training_loop, order=args.order)

    def progress(outcome: Any, done: int, total: int) -> None:
        if args.quiet:
            return
        state = f"error: {outcome.error}" if outcome.error else f"{outcome.events} events"
        print(f"[{done}/{total}] rank {outcome.rank}: {state} ({outcome.seconds:.1f} s, "
              f"{outcome.peak_rss_bytes / 2**20:.0f} MiB)", file=sys.stderr, flush=True)

    try:
        result = run_commtrace(config, args.out, ranks=args.ranks, jobs=args.jobs,
                               progress=progress)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"error: {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"traced {len(result.ranks) - len(result.failed)} of {len(result.ranks)} ranks of a "
          f"{config.world}-rank layout into {result.out} in {result.seconds:.1f} s "
          f"({result.jobs} at a time, peak {result.peak_rss_bytes / 2**20:.0f} MiB per rank)",
          file=sys.stderr)
    return EXIT_FAILED if result.failed else EXIT_OK
