-- Schema version 4: identity aliases (docs/behaviour.md §4). One person or chat seen under several
-- ids on one platform: `alias_id` folds into `canonical_id` before keys, pseudonyms and owner
-- scoping are computed. Chains (a → b, b → c) are followed by the reader; `source` says what
-- taught the plugin the mapping (audit only).
CREATE TABLE identity_aliases (
    platform            TEXT NOT NULL,
    alias_id            TEXT NOT NULL,
    canonical_id        TEXT NOT NULL,
    source              TEXT NOT NULL DEFAULT '',
    first_seen          TEXT NOT NULL,     -- ISO-8601 UTC
    last_seen           TEXT NOT NULL,     -- ISO-8601 UTC
    PRIMARY KEY (platform, alias_id)
);
CREATE INDEX identity_aliases_by_canonical ON identity_aliases(platform, canonical_id);
