{#- Row counts for dbt's docs. Spark's catalog holds the size of a table dbt wrote, but its rows only after
`analyze table ... compute statistics` (one count per table); `changelake dbt docs generate` runs this
operation first, so the catalog the docs read has them, and the builds pay nothing for it.
-#}
{% macro compute_statistics() %}
{%- set tables = ('table', 'incremental') -%}
{%- set models = graph.nodes.values() | selectattr('resource_type', 'equalto', 'model') -%}
{%- for node in models if node.config.materialized in tables -%}
{%- set relation = adapter.get_relation(database=node.database, schema=node.schema, identifier=node.alias) -%}
{%- if relation is not none -%}
{%- do run_query('analyze table ' ~ relation ~ ' compute statistics') -%}
{%- endif -%}
{%- endfor -%}
{% endmacro %}
