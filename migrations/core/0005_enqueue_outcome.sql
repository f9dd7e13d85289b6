-- What an enqueue did (skiplock.enqueue_result, the Rust API's `Enqueued`): inserted a new job,
-- found an available job of the same kind and queue holding the unique_key and left it as it
-- was (on_conflict 'keep'), or updated that job with what the caller gave ('replace').
CREATE TYPE skiplock.enqueue_outcome AS ENUM ('inserted', 'deduplicated', 'replaced');
