{#
    Elements of the first input tensor in a cpu_op's args (`Input Dims`): the
    product of up to four dims, of the first tensor of a TensorList too.
    NULL when the args give no dims.
#}
{%- macro first_input_elements(args) -%}
    {%- set ns = namespace(parts=[]) -%}
    {%- for tensor in [[0], [0, 0]] -%}
        {%- set dims = [] -%}
        {%- for d in range(4) -%}
            {%- set expr = "try_cast(" ~ json_text(args, 'Input Dims', tensor + [d]) ~ " as bigint)" -%}
            {%- do dims.append(expr if d == 0 else "coalesce(" ~ expr ~ ", 1)") -%}
        {%- endfor -%}
        {%- do ns.parts.append(dims | join(' * ')) -%}
    {%- endfor -%}
    coalesce({{ ns.parts | join(', ') }})
{%- endmacro %}

