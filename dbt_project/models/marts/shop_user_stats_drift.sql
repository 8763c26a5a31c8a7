-- The aggregation engine's table beside its exact recomputation, per key. `drift` is the largest absolute
-- difference; it is 0 when redeliveries were removed (source dedup: kafka-offsets) and positive otherwise.
with engine as (
    select * from {{ ref('stg_shop_user_stats') }}
),

exact as (
    select * from {{ ref('int_shop_user_stats_exact') }}
),

joined as (
    select
        coalesce(engine.shop_id, exact.shop_id) as shop_id,
        coalesce(engine.user_id, exact.user_id) as user_id,
        coalesce(engine.num_orders, 0) as engine_num_orders,
        coalesce(exact.num_orders, 0) as exact_num_orders,
        coalesce(engine.total_amount, 0) as engine_total_amount,
        coalesce(exact.total_amount, 0) as exact_total_amount
    from engine
    full outer join exact
        on engine.shop_id = exact.shop_id and engine.user_id = exact.user_id
),

drift as (
    select
        *,
        engine_num_orders - exact_num_orders as num_orders_drift,
        engine_total_amount - exact_total_amount as total_amount_drift,
        cast(greatest(
            abs(engine_num_orders - exact_num_orders),
            abs(engine_total_amount - exact_total_amount)
        ) as decimal(20, 2)) as drift
    from joined
)

select * from drift
