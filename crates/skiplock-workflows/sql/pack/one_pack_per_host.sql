-- The pack queue's per-key concurrency of 1, its key rate kept (skiplock.set_one_pack_per_host).
SELECT skiplock.set_one_pack_per_host()
