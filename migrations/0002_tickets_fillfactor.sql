-- Room on each page of tickets for the row's next version: an update that changes no indexed
-- column (a counter, a lease) can then stay on its page and skip the indexes (a HOT update).
ALTER TABLE tickets SET (fillfactor = 80);
