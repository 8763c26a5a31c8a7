{#- Generic test: every key's `column` drift is at most var('drift_threshold') (default 0). -#}
{% test drift_within_threshold(model, column_name) %}
select *
from {{ model }}
where {{ column_name }} > {{ var('drift_threshold', 0) }}
{% endtest %}
