-- shop.shop_revenue recomputed from its input: what the orders added, less what refunds and corrections
-- took back (a -U or -D record carries the order as it was). A retraction that reaches a shop before any of
-- its orders changes nothing in the table (docs/semantics.md §4.7): the sums agree while refunds follow their
-- orders, as the demo source's do.
with events as (
    select * from {{ ref('stg_shop_revenue_events') }}
),

signed as (
    select
        shop_id,
        case when op in ('-U', '-D') then -revenue else revenue end as revenue,
        case when op in ('-U', '-D') then -orders else orders end as orders
    from events
),

aggregated as (
    select
        shop_id,
        sum(revenue) as revenue,
        sum(orders) as orders
    from signed
    group by shop_id
)

select * from aggregated
