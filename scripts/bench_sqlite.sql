-- The real-program workload of `make bench` (scripts/bench.sh), run as
-- `sqlite3 -batch -init /dev/null :memory: < scripts/bench_sqlite.sql`:
-- 10000 rows of pseudo-random text inserted into an indexed table, then
-- queries over them. The text comes from a fixed linear congruential
-- generator, not random(), so every run makes the same allocator calls
-- (about 40000 mallocs and as many frees).

-- 1600 characters of pseudo-random hexadecimal text to cut values from.
CREATE TABLE alpha(s TEXT);
WITH RECURSIVE r(i, x) AS (
  SELECT 1, 987654321
  UNION ALL
  SELECT i + 1, (x * 1103515245 + 12345) % 2147483648 FROM r WHERE i < 200
)
INSERT INTO alpha SELECT group_concat(printf('%08x', x), '') FROM r;

-- Keys in random order, so that the index grows by splitting pages all
-- over; values of 16 to 215 characters.
CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v TEXT);
CREATE INDEX t_k ON t(k);
BEGIN;
WITH RECURSIVE r(i, x) AS (
  SELECT 1, 12345
  UNION ALL
  SELECT i + 1, (x * 1103515245 + 12345) % 2147483648 FROM r WHERE i < 10000
)
INSERT INTO t(k, v)
  SELECT printf('%08x', x), substr((SELECT s FROM alpha), 1 + x % 1000, 16 + (x / 1000) % 200) FROM r;
COMMIT;

SELECT count(*), sum(length(v)), min(k), max(k) FROM t WHERE k BETWEEN '1' AND '8';
SELECT substr(k, 1, 2) AS p, count(*), max(length(v)) FROM t GROUP BY p ORDER BY 2 DESC, 1 LIMIT 3;
SELECT k, length(v) FROM t ORDER BY v DESC LIMIT 3;
