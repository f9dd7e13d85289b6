-- What processing produced for packet $1 (the packet page only: it can be large).
SELECT p.result FROM skiplock.packets p WHERE p.id = $1
