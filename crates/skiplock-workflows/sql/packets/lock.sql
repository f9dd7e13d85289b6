-- Lock packet $1 and read its state (the Rust-side transition check).
SELECT state FROM skiplock.packets WHERE id = $1 FOR UPDATE
