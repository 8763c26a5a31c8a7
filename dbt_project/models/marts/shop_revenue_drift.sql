-- Revenue per shop net of refunds, as the retraction table keeps it, beside its recomputation from the
-- input, per shop. `drift` is the largest absolute difference: 0 when every refund and correction retracted.
with engine as (
    select * from {{ ref('stg_shop_revenue') }}
),

exact as (
    select * from {{ ref('int_shop_revenue_exact') }}
),

joined as (
    select
        coalesce(engine.shop_id, exact.shop_id) as shop_id,
        coalesce(engine.revenue, 0) as engine_revenue,
        coalesce(exact.revenue, 0) as exact_revenue,
        coalesce(engine.orders, 0) as engine_orders,
        coalesce(exact.orders, 0) as exact_orders
    from engine
    full outer join exact
        on engine.shop_id = exact.shop_id
),

drift as (
    select
        *,
        engine_revenue - exact_revenue as revenue_drift,
        engine_orders - exact_orders as orders_drift,
        cast(greatest(
            abs(engine_revenue - exact_revenue),
            abs(engine_orders - exact_orders)
        ) as decimal(20, 2)) as drift
    from joined
)

select * from drift
