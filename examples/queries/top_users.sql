-- The ten most active users: their events, purchases, what they spent (the purchases'
-- properties.amount), and when they were last seen.
SELECT user_id,
       count(*) AS events,
       count(*) FILTER (WHERE event = 'purchase') AS purchases,
       round(coalesce(sum(TRY_CAST(properties ->> '$.amount' AS DOUBLE)), 0), 2) AS spent,
       max(ts) AS last_seen
FROM events
GROUP BY user_id
ORDER BY events DESC, user_id
LIMIT 10;
