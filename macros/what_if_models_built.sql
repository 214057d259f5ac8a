{#
    what_if_models_built(): whether this build makes the what-if models
    (models/intermediate/whatif, models/marts/whatif): on DuckDB unless
    the var `whatif` is false. dbt_project.yml's `+enabled` lines state the
    same condition (dbt renders that file without the project's macros);
    a model that reads fct_what_if where it exists (fct_findings) asks here.
#}
{% macro what_if_models_built() -%}
    {{ return(target.type == 'duckdb' and (var('whatif', true) | string | lower) != 'false') }}
{%- endmacro %}
