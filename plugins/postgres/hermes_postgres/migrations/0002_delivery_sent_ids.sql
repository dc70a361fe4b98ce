-- Schema version 2: the platform message ids a delivered obligation produced (docs/behaviour.md §6),
-- so a platform's later delivery report settles the obligation it belongs to. `sent_ids` is a
-- JSON array of strings (one id per chunk sent), NULL until a send recorded ids; reports are
-- matched within the last day only (`updated_ts`, indexed).
ALTER TABLE delivery_obligations ADD COLUMN sent_ids TEXT;
CREATE INDEX delivery_by_updated ON delivery_obligations(updated_ts);
