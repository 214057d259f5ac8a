"""The base layer: what ingest, the build, reports, the Megatron patch and the CLI share.

Where a warehouse lives and what it holds (:mod:`.warehouse`), the build lock
and the copy-then-publish of its database (:mod:`.publish`), the file
formats that a training job writes and ingest reads (:mod:`.topology_files`,
:mod:`.pp_timer_format`, :mod:`.model_config_format`) and megatron-core's rank
groups (:mod:`.topology`).
Nothing here imports another tracehouse package, so the Megatron patch can
import it inside a training job without pulling in DuckDB, dbt or pyarrow.
"""
