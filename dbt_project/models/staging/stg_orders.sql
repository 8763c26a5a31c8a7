with source as (
    select * from {{ source('shop', 'orders') }}
)

select
    order_id,
    shop_id,
    user_id,
    item_id,
    amount,
    status,
    updated_at
from source
