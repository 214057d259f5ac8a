{#
    Spark: the per-trace models' `delete+insert` (macros/per_trace.sql)
    becomes a plain Parquet table, rebuilt each time. dbt-spark's
    incremental strategies need a table format with row-level deletes
    (merge: Delta, Iceberg, Hudi) or partitions (insert_overwrite), and a
    trace-partitioned table of 4,096 ranks x iterations files per model
    would cost more to list than to rebuild. Other strategies go to
    dbt-spark's own incremental materialization unchanged.
#}
{% materialization incremental, adapter='spark' %}
    {%- if config.get('incremental_strategy') == 'delete+insert' -%}
        {{ return(materialization_table_spark()) }}
    {%- else -%}
        {{ return(dbt_spark.materialization_incremental_spark()) }}
    {%- endif -%}
{% endmaterialization %}
