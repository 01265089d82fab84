-- A database-only attacker cannot shorten or drop a chain (issue 35). Each chain head carries
-- mac, an HMAC of (chain, seq, hash) under the chain's key, written in the batch's
-- transaction: a head set back by hand does not verify. audit_chains registers every chain
-- when its process starts, numbered from 1, each registration's MAC covering the one before
-- (anchor): a chain deleted whole, head and records, leaves a registration without a head or
-- a gap in the numbers. The first registration also seals how many unchained (pre-chaining)
-- records the log held, so one inserted later is a break. Heads written before this
-- migration have no mac and belong to no registration: verify counts them apart.
ALTER TABLE audit_chain_heads ADD COLUMN mac TEXT NOT NULL DEFAULT '';

CREATE TABLE audit_chains (
    no            INTEGER PRIMARY KEY CHECK (no > 0),
    chain_id      TEXT    NOT NULL UNIQUE CHECK (chain_id <> ''),
    registered_at INTEGER NOT NULL,
    legacy        INTEGER NOT NULL CHECK (legacy >= 0),
    anchor        TEXT    NOT NULL,
    mac           TEXT    NOT NULL CHECK (mac <> '')
);
