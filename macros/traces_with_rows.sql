{#
    traces_with_rows(table, traces, condition): the traces of `traces`
    (traces_pending() or loaded_traces(); none for every loaded trace)
    that have a row of lake table `table` satisfying `condition` (SQL on
    the table's staging columns), read while dbt builds, in the same forms
    ({'ids': [...], 'runs': {...}}, or {'query': ...} above
    var('max_literal_traces')), for lake_scan() and trace_filter().
    Why: a model that needs only some traces' rows (int_cuda_syncs_resolved:
    those with a sync event, which most captures lack) then scans only
    their files, and none when there are none; the same restriction written
    as a subquery inside the model's query did not keep DuckDB from
    scanning every trace. A compile (the linter's), a unit test or another
    engine gets `traces` back: the whole query, filtered inside.
#}
{% macro traces_with_rows(table, traces, condition) -%}
    {%- if execute and model.resource_type != 'unit_test' and target.type == 'duckdb'
        and flags.WHICH in ('build', 'run') -%}
        {%- set with_rows -%}
            (
                select distinct
                    rows_of.trace_id,
                    rows_of.run_id
                from {{ lake_scan(table, traces) }} as rows_of
                where ({{ condition }}) and {{ trace_filter(traces, 'rows_of.trace_id') }}
            )
        {%- endset -%}
        {{ return(loaded_trace_ids(with_rows, 'true')) }}
    {%- endif -%}
    {{ return(traces) }}
{%- endmacro %}
