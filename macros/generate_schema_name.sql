{#
    Models and seeds with a custom schema (`+schema:` in dbt_project.yml)
    land in exactly that schema, not dbt's default `<target>_<custom>`.
    The target's own schema (`main`) holds what people query: the staging
    views and the marts; `intermediate` and `seeds` hold the rest, so
    `show tables` and `tracehouse export table` list only those.
#}
{% macro generate_schema_name(custom_schema_name, node) -%}
    {%- if custom_schema_name is none -%}
        {{ target.schema }}
    {%- else -%}
        {{ custom_schema_name | trim }}
    {%- endif -%}
{%- endmacro %}
