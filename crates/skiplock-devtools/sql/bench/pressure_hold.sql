-- Inside the holder's open transaction: take a transaction id, so the vacuum horizon stays
-- here until the transaction ends (as a session left `idle in transaction` after a write).
SELECT txid_current()
