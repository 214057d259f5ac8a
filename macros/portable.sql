{#
    Portable SQL: one macro per construct whose spelling differs between
    DuckDB and Spark SQL, each dispatched (adapter.dispatch) with a
    `duckdb__` and a `spark__` implementation (and a `default__` in ANSI or
    Trino spelling where one exists, for the next adapter). Models call the
    macro instead of the DuckDB function; tests/test_sql_portability.py
    compiles every model for Spark and fails, naming the model and the
    construct, on anything that does not parse as Spark SQL.

    Arrays are 1-based in the argument of `array_element` on every target.
    Documented one by one in macros/_macros.yml.
#}

{#- Number of elements of an array (DuckDB `len`, Spark `size`). -#}
{% macro array_length(array) -%}
    {{ return(adapter.dispatch('array_length', 'tracehouse')(array)) }}
{%- endmacro %}
{% macro default__array_length(array) -%} cardinality({{ array }}) {%- endmacro %}
{% macro duckdb__array_length(array) -%} len({{ array }}) {%- endmacro %}
{% macro spark__array_length(array) -%} size({{ array }}) {%- endmacro %}

{#- An array of the given SQL expressions (a list of strings), in order:
    DuckDB `list_value(..)` (a LIST, as `[a, b]`), Spark and ANSI `array(..)`. -#}
{% macro make_array(items) -%}
    {{ return(adapter.dispatch('make_array', 'tracehouse')(items)) }}
{%- endmacro %}
{% macro default__make_array(items) -%} array[{{ items | join(', ') }}] {%- endmacro %}
{% macro duckdb__make_array(items) -%} list_value({{ items | join(', ') }}) {%- endmacro %}
{% macro spark__make_array(items) -%} array({{ items | join(', ') }}) {%- endmacro %}

{#- The elements of an array in their own order, as text joined by
    `separator`: DuckDB `array_to_string`, Spark and ANSI `array_join`. -#}
{% macro array_to_text(array, separator="','") -%}
    {{ return(adapter.dispatch('array_to_text', 'tracehouse')(array, separator)) }}
{%- endmacro %}
{% macro default__array_to_text(array, separator) -%} array_join({{ array }}, {{ separator }}) {%- endmacro %}
{% macro duckdb__array_to_text(array, separator) -%} array_to_string({{ array }}, {{ separator }}) {%- endmacro %}

{#- True when `array` holds `value`. -#}
{% macro array_has(array, value) -%}
    {{ return(adapter.dispatch('array_has', 'tracehouse')(array, value)) }}
{%- endmacro %}
{% macro default__array_has(array, value) -%} contains({{ array }}, {{ value }}) {%- endmacro %}
{% macro duckdb__array_has(array, value) -%} list_contains({{ array }}, {{ value }}) {%- endmacro %}
{% macro spark__array_has(array, value) -%} array_contains({{ array }}, {{ value }}) {%- endmacro %}

{#- True when the two arrays share at least one element. -#}
{% macro arrays_overlap(left, right) -%}
    {{ return(adapter.dispatch('arrays_overlap', 'tracehouse')(left, right)) }}
{%- endmacro %}
{% macro default__arrays_overlap(left, right) -%} arrays_overlap({{ left }}, {{ right }}) {%- endmacro %}
{% macro duckdb__arrays_overlap(left, right) -%} list_has_any({{ left }}, {{ right }}) {%- endmacro %}

{#- The `position`-th element (1-based) of an array, NULL past its end. -#}
{% macro array_element(array, position) -%}
    {{ return(adapter.dispatch('array_element', 'tracehouse')(array, position)) }}
{%- endmacro %}
{% macro default__array_element(array, position) -%} element_at({{ array }}, {{ position }}) {%- endmacro %}
{% macro duckdb__array_element(array, position) -%} ({{ array }})[{{ position }}] {%- endmacro %}
{% macro spark__array_element(array, position) -%} try_element_at({{ array }}, cast({{ position }} as int)) {%- endmacro %}

{#- The elements of an array in ascending order, joined by `separator`
    into a string: a canonical key of a set of ranks. -#}
{% macro sorted_array_key(array, separator="','") -%}
    {{ return(adapter.dispatch('sorted_array_key', 'tracehouse')(array, separator)) }}
{%- endmacro %}
{% macro default__sorted_array_key(array, separator) -%}
    array_join(array_sort({{ array }}), {{ separator }})
{%- endmacro %}
{% macro duckdb__sorted_array_key(array, separator) -%}
    array_to_string(list_sort({{ array }}), {{ separator }})
{%- endmacro %}

{#- The array [start, start + 1, ..., stop - 1] of bigints (empty when stop <= start). -#}
{% macro integer_range(start, stop) -%}
    {{ return(adapter.dispatch('integer_range', 'tracehouse')(start, stop)) }}
{%- endmacro %}
{% macro default__integer_range(start, stop) -%}
    case when {{ stop }} > {{ start }} then sequence(cast({{ start }} as bigint), cast({{ stop }} as bigint) - 1) else array[] end
{%- endmacro %}
{% macro duckdb__integer_range(start, stop) -%} range({{ start }}, {{ stop }}) {%- endmacro %}
{% macro spark__integer_range(start, stop) -%}
    case
        when {{ stop }} > {{ start }}
            then sequence(cast({{ start }} as bigint), cast({{ stop }} as bigint) - 1)
        else cast(array() as array<bigint>)
    end
{%- endmacro %}

{#- Select-list items exploding `array` into one row per element: the
    element as `value_alias` and its 0-based position as `position_alias`
    (both bigint). Use in a select whose other items are plain columns. -#}
{% macro explode_with_position(array, value_alias, position_alias) -%}
    {{ return(adapter.dispatch('explode_with_position', 'tracehouse')(array, value_alias, position_alias)) }}
{%- endmacro %}
{% macro default__explode_with_position(array, value_alias, position_alias) -%}
    {{ exceptions.raise_compiler_error('explode_with_position has no implementation for ' ~ adapter.type()) }}
{%- endmacro %}
{% macro duckdb__explode_with_position(array, value_alias, position_alias) -%}
    cast(unnest({{ array }}) as bigint) as {{ value_alias }},
    cast(unnest(range(0, len({{ array }}))) as bigint) as {{ position_alias }}
{%- endmacro %}
{% macro spark__explode_with_position(array, value_alias, position_alias) -%}
    posexplode({{ array }}) as ({{ position_alias }}, {{ value_alias }})
{%- endmacro %}

{#- Aggregate: the strings of a group joined by `separator` in the order of
    `order_by` (with `distinct=true`, each distinct string once; then
    `order_by` must be the expression itself). -#}
{% macro string_agg_ordered(expression, separator, order_by, distinct=false) -%}
    {{ return(adapter.dispatch('string_agg_ordered', 'tracehouse')(expression, separator, order_by, distinct)) }}
{%- endmacro %}
{% macro default__string_agg_ordered(expression, separator, order_by, distinct) -%}
    listagg({{ 'distinct ' if distinct }}{{ expression }}, {{ separator }}) within group (order by {{ order_by }})
{%- endmacro %}
{% macro duckdb__string_agg_ordered(expression, separator, order_by, distinct) -%}
    string_agg({{ 'distinct ' if distinct }}{{ expression }}, {{ separator }} order by {{ order_by }})
{%- endmacro %}

{#- The mean of a DOUBLE expression, added up in value order, so that it is
    the same to the last bit whatever order the rows arrive in. A plain avg
    of doubles depends on that order: an incremental build and a full
    refresh store a per-run table's rows in different orders, and on the
    shared megatron_cpu/tp2_pp2_dp2 run fct_iteration_summary.bubble_ratio
    came out 0.25892062589000925 in one and 0.2589206258900092 in the other.
    Integer columns need none of this (their sums are exact). -#}
{% macro mean_in_value_order(expression) -%}
    {{ return(adapter.dispatch('mean_in_value_order', 'tracehouse')(expression)) }}
{%- endmacro %}
{% macro default__mean_in_value_order(expression) -%}
    avg({{ expression }} order by {{ expression }})
{%- endmacro %}
{% macro spark__mean_in_value_order(expression) -%}
    aggregate(
        array_sort(collect_list(cast({{ expression }} as double))),
        cast(0 as double), (total, value) -> total + value
    ) / nullif(size(collect_list({{ expression }})), 0)
{%- endmacro %}

{#- Integer division of non-negative integers, rounding down. -#}
{% macro integer_divide(dividend, divisor) -%}
    {{ return(adapter.dispatch('integer_divide', 'tracehouse')(dividend, divisor)) }}
{%- endmacro %}
{% macro default__integer_divide(dividend, divisor) -%} ({{ dividend }}) / ({{ divisor }}) {%- endmacro %}
{% macro duckdb__integer_divide(dividend, divisor) -%} (({{ dividend }}) // ({{ divisor }})) {%- endmacro %}
{% macro spark__integer_divide(dividend, divisor) -%} (({{ dividend }}) div ({{ divisor }})) {%- endmacro %}

{#- The text at a top-level `key` of a JSON object string, or at
    key[i][j].. with `indexes` (0-based array positions), NULL when absent or
    not JSON. `key` is a plain name; spaces are fine. -#}
{% macro json_text(json, key, indexes=[]) -%}
    {{ return(adapter.dispatch('json_text', 'tracehouse')(json, key, indexes)) }}
{%- endmacro %}
{% macro default__json_text(json, key, indexes=[]) -%}
    json_extract_scalar({{ json }}, '$["{{ key }}"]{% for i in indexes %}[{{ i }}]{% endfor %}')
{%- endmacro %}
{% macro duckdb__json_text(json, key, indexes=[]) -%}
    json_extract_string({{ json }}, '$."{{ key }}"{% for i in indexes %}[{{ i }}]{% endfor %}')
{%- endmacro %}
{% macro spark__json_text(json, key, indexes=[]) -%}
    get_json_object({{ json }}, "$['{{ key }}']{% for i in indexes %}[{{ i }}]{% endfor %}")
{%- endmacro %}

{#- The text at item `index` (0-based) of a JSON array string, then at its
    top-level `key` (`[{"name": ..}, ..]` -> the index-th name); NULL when
    absent or not JSON. Kineto's `deviceProperties` is such an array. -#}
{% macro json_item_text(json, index, key) -%}
    {{ return(adapter.dispatch('json_item_text', 'tracehouse')(json, index, key)) }}
{%- endmacro %}
{% macro default__json_item_text(json, index, key) -%}
    json_extract_scalar({{ json }}, '$[{{ index }}]["{{ key }}"]')
{%- endmacro %}
{% macro duckdb__json_item_text(json, index, key) -%}
    json_extract_string({{ json }}, '$[{{ index }}]."{{ key }}"')
{%- endmacro %}
{% macro spark__json_item_text(json, index, key) -%}
    get_json_object({{ json }}, "$[{{ index }}]['{{ key }}']")
{%- endmacro %}
