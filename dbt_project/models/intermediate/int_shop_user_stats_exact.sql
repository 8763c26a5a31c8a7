-- The exact aggregation behind shop.shop_user_stats: every order event counted once, however often Kafka
-- delivered it (a redelivery repeats its topic/partition/offset).
with events as (
    select * from {{ ref('stg_shop_user_stats_events') }}
),

deduplicated as (
    select *
    from (
        select
            *,
            row_number() over (
                partition by topic, kafka_partition, kafka_offset order by batch_id, line
            ) as delivery
        from events
        where op in ('+I', '+U')
    ) as numbered
    where delivery = 1
),

aggregated as (
    select
        shop_id,
        user_id,
        sum(num_orders) as num_orders,
        sum(total_amount) as total_amount,
        max(last_order_at) as last_order_at,
        count(*) as events
    from deduplicated
    group by shop_id, user_id
)

select * from aggregated
