-- Clicks per user per 1-hour tumbling window, incremental over the changelog by batch: a run recomputes, from
-- the whole changelog, only the windows that batches newer than the last processed one touched, and
-- overwrites those window partitions. A replayed batch adds no changelog rows, so nothing changes.
{{
    config(
        materialized='incremental',
        incremental_strategy='insert_overwrite',
        partition_by=['window_start'],
        on_schema_change='fail',
    )
}}

with changelog as (
    select * from {{ ref('stg_pageviews_changelog') }}
),

signed as (
    select
        user_id,
        date_trunc('hour', viewtime) as window_start,
        batch_id,
        case when change_type in ('+I', '+U') then 1 else -1 end as sign
    from changelog
),

{% if is_incremental() %}
touched_windows as (
    select distinct window_start
    from signed
    where batch_id > (select coalesce(max(processed.last_batch_id), 0) from {{ this }} as processed)
),
{% endif %}

windowed as (
    select
        user_id,
        window_start + interval 1 hour as window_end,
        sum(sign) as clicks,
        max(batch_id) as last_batch_id,
        window_start
    from signed
    {% if is_incremental() %}
    where window_start in (select touched_windows.window_start from touched_windows)
    {% endif %}
    group by user_id, window_start
)

select * from windowed
where clicks > 0
