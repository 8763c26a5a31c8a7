with source as (
    select * from {{ source('changelake', 'shop__shop_revenue') }}
)

select
    shop_id,
    revenue,
    orders,
    last_order_at
from source
