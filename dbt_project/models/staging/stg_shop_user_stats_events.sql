-- Order events as delivered to shop.shop_user_stats; redeliveries keep their original Kafka offset.
with source as (
    select * from {{ source('landed_input', 'shop__shop_user_stats__input') }}
)

select
    _topic as topic,
    _partition as kafka_partition,
    _offset as kafka_offset,
    _batch_id as batch_id,
    _line as line,
    _op as op,
    shop_id,
    user_id,
    num_orders,
    total_amount,
    last_order_at
from source
