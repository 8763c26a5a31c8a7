-- Order changes as landed for shop.shop_revenue (Debezium CDC): an insert is +I, a correction -U (the old
-- order) then +U (the new one), a refund -D (the refunded order).
with source as (
    select * from {{ source('landed_input', 'shop__shop_revenue__input') }}
)

select
    _batch_id as batch_id,
    _line as line,
    _op as op,
    shop_id,
    revenue,
    orders
from source
