-- The funnel from a page to a sign-up to a purchase: users who loaded a page, those who then
-- signed up, and those who then bought (each step after the user's first time at the step
-- before it).
WITH page AS (
    SELECT user_id, min(ts) AS at
    FROM events
    WHERE event = 'page_load'
    GROUP BY user_id
),
signup AS (
    SELECT e.user_id, min(e.ts) AS at
    FROM events AS e
    JOIN page AS p ON e.user_id = p.user_id AND e.ts > p.at
    WHERE e.event = 'signup'
    GROUP BY e.user_id
),
purchase AS (
    SELECT e.user_id, min(e.ts) AS at
    FROM events AS e
    JOIN signup AS s ON e.user_id = s.user_id AND e.ts > s.at
    WHERE e.event = 'purchase'
    GROUP BY e.user_id
)
SELECT step, users, round(100.0 * users / first_value(users) OVER (ORDER BY n), 1) AS pct
FROM (
    SELECT 1 AS n, '1. loaded a page' AS step, count(*) AS users FROM page
    UNION ALL SELECT 2, '2. then signed up', count(*) FROM signup
    UNION ALL SELECT 3, '3. then purchased', count(*) FROM purchase
)
ORDER BY n;
