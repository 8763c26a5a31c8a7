{#- Generic test: the combination of `columns` is unique (a compound grain key). Fails with the duplicates.
-#}
{% test unique_combination_of_columns(model, columns) %}
select {{ columns | join(', ') }}, count(*) as duplicates
from {{ model }}
group by {{ columns | join(', ') }}
having count(*) > 1
{% endtest %}
