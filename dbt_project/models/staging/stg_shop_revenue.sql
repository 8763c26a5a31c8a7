with source as (
    select * from {{ source('shop', 'shop_revenue') }}
)

select
    shop_id,
    revenue,
    orders,
    last_order_at
from source
