with orders as (
    select * from {{ ref('stg_orders') }}
),

per_shop as (
    select
        shop_id,
        count(*) as order_count,
        sum(amount) as total_amount
    from orders
    group by shop_id
)

select * from per_shop
