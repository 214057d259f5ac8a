"""``tracehouse commtrace``: the collective log of a Megatron step, without GPUs.

:mod:`.run` forks one process per rank and writes the logs; :mod:`.megatron_step`
runs megatron-core's step in one of them, with torch.distributed intercepted by
:mod:`.interception`.
"""
