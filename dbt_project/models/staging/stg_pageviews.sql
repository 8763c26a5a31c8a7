with source as (
    select * from {{ source('web', 'pageviews') }}
)

select
    event_id,
    user_id,
    page_id,
    viewtime,
    user_region as region
from source
