-- Events per day, by kind: the day's traffic at a glance.
SELECT CAST(ts AS DATE) AS day,
       count(*) AS events,
       count(*) FILTER (WHERE event = 'page_load') AS page_loads,
       count(*) FILTER (WHERE event = 'signup') AS signups,
       count(*) FILTER (WHERE event = 'purchase') AS purchases,
       count(DISTINCT user_id) AS users
FROM events
GROUP BY day
ORDER BY day;
