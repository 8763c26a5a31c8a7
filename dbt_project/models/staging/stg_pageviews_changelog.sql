with source as (
    select * from {{ source('web', 'pageviews__changelog') }}
)

select
    _bucket as bucket,
    _log_offset as log_offset,
    _batch_id as batch_id,
    _change_type as change_type,
    event_id,
    user_id,
    viewtime
from source
