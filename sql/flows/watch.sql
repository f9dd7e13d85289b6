-- Watch job $1 (its finish is NOTIFYed on skiplock_finished) and read its state and result.
SELECT state, result FROM skiplock.watch($1)
