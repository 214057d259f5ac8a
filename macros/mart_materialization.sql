{#
    How a mart that is a per-trace table with the run's small lookups joined
    in (fct_kernels, fct_cpu_steps, fct_cpu_collectives), or a projection of
    one (fct_kernel_launches), is materialized: a view on DuckDB, a table
    elsewhere. The same holds for the intermediate models that hold such a
    join's rules for those marts and for the models below them
    (int_kernels_placed, int_cpu_collectives_placed).

    Why a view on DuckDB: writing such a mart as a table cost more than any
    reader's join (fct_kernels at 256 ranks x 2 iterations: 0.8 s, 1.5 CPU
    s, to write a million rows on every build, new traces or not; 0.1 s to
    join them; benchmarks/README.md), and a view never holds a stale
    lookup. Why a table on other engines (Spark): there the marts are the
    Parquet files other tools read.
#}
{% macro lookup_join_materialization() -%}
    {{ return('view' if target.type == 'duckdb' else 'table') }}
{%- endmacro %}
