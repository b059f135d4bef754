"""The compile queue's ranks (workers.py): a job's rank says what waits for it. Its own
module so that the kernels' loaders below the pool name a rank without importing it."""

# Queue ranks, lowest first. FIRST: kernels a switch or a caller's array path waits for
# (a background compile's stage-1 and serial kernels, the optimizer's, pooling and
# BatchNorm kernels). STEADY: hand-written kernels a compiled step runs at every call and
# whose speed hangs on them (compiler/cpu/kernels/loader.py: the recurrent whole loops,
# convolution's unfold/fold, BatchNorm, pooling, ReLU's backward) and a compiled entry's
# run-time variant for a layout no plan listed (prepare.prepare_variant). EAGER: eager ops'
# elementwise kernels (compiler/cpu/kernels/vectorized.py): numpy runs those ops meanwhile,
# and they mostly serve tier 0, which the FIRST jobs end. One that only tier 0 and the
# stand-in of a fused kernel still compiling asked for moves down to LATER (`demote`,
# loader.py `standing_in`). LATER: a background compile's parfor upgrade, which must not
# hold back any of the others, even when submitted before them.
FIRST, STEADY, EAGER, LATER = 0, 1, 2, 3
