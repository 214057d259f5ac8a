{#
    Portable regular-expression test: true when `text` matches `pattern`
    anywhere (RE2/Java syntax; `(?i)` for case-insensitive). Dispatched so
    the same models run on DuckDB, Spark and Trino.
#}
{% macro regex_matches(text, pattern) -%}
    {{ return(adapter.dispatch('regex_matches', 'tracehouse')(text, pattern)) }}
{%- endmacro %}

{% macro default__regex_matches(text, pattern) -%}
    regexp_like({{ text }}, {{ pattern }})
{%- endmacro %}

{% macro duckdb__regex_matches(text, pattern) -%}
    regexp_matches({{ text }}, {{ pattern }})
{%- endmacro %}

{% macro spark__regex_matches(text, pattern) -%}
    ({{ text }} rlike {{ pattern }})
{%- endmacro %}
