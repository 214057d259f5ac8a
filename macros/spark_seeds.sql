{#
    Spark: seed rows as literals that survive any text. dbt-spark's
    `session` method pastes seed values into the INSERT between quotes
    without escaping them (a pattern such as `(?i)optimizer's` breaks the
    statement) and turns an empty CSV field into the string 'None'. This
    override (the root project's `spark__` implementation wins dispatch)
    writes each string as decode(unhex('<hex of its UTF-8>'), 'UTF-8'),
    each empty field as NULL and each number as itself, all cast to the
    seed's column type, one `select` per row joined by `union all` (an
    inline VALUES table takes constants only).
#}
{% macro spark__load_csv_rows(model, agate_table) %}
    {%- set column_override = model['config'].get('column_types', {}) -%}
    {%- set statements = [] -%}
    {%- for chunk in agate_table.rows | batch(get_batch_size()) -%}
        {%- set sql -%}
            insert into {{ this.render() }}
            {% for row in chunk -%}
                select
                {%- for value in row %}
                    {%- set type = column_override.get(
                        agate_table.column_names[loop.index0],
                        adapter.convert_type(agate_table, loop.index0)
                    ) %}
                    cast({{ spark_seed_literal(value) }} as {{ type }})
                    {%- if not loop.last %},{% endif -%}
                {%- endfor %}
                {% if not loop.last %}union all{% endif %}
            {% endfor %}
        {%- endset -%}
        {%- do adapter.add_query(sql, abridge_sql_log=True) -%}
        {%- if loop.index0 == 0 -%}
            {%- do statements.append(sql) -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(statements[0] if statements else '') }}
{% endmacro %}

{% macro spark_seed_literal(value) -%}
    {%- if value is none -%}
        null
    {%- elif value is number and value is not boolean -%}
        {{ value }}
    {%- else -%}
        decode(unhex('{{ (value | string).encode('utf-8').hex() }}'), 'UTF-8')
    {%- endif -%}
{%- endmacro %}
