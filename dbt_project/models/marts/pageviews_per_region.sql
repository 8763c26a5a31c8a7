-- PV and UV per region: the upsert-kafka connector documentation's example query.
with pageviews as (
    select * from {{ ref('stg_pageviews') }}
),

per_region as (
    select
        region,
        count(*) as pv,
        count(distinct user_id) as uv
    from pageviews
    group by region
)

select * from per_region
