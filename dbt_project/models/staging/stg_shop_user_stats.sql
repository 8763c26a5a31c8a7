with source as (
    select * from {{ source('shop', 'shop_user_stats') }}
)

select
    shop_id,
    user_id,
    num_orders,
    total_amount,
    last_order_at
from source
