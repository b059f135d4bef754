"""The compile queue's ranks (workers.py): a job's rank says what waits for it. Its own
module so that the kernels' loaders below the pool name a rank without importing it."""

# Queue ranks, lowest first. FIRST: kernels a switch or a caller's array path waits for
# (a background compile's stage-1 and serial kernels, the optimizer's, pooling and
# BatchNorm kernels). EAGER: eager ops' elementwise kernels
# (compiler/cpu/kernels/vectorized.py): numpy runs those ops meanwhile, and in a process whose compiled
# function runs tier 0 they mostly serve tier 0, which the FIRST jobs end: a Transformer
# step's two eager ReLU kernels (parfor variants, the slowest kind) took a worker for
# seconds while its stage-1 kernels queued. STEADY: hand-written eager kernels that a
# compiled step also runs at every call and whose speed hangs on them, the layers' own
# kernels (compiler/cpu/kernels/loader.py): the recurrent whole loops (compiler/cpu/kernels/lstm_kernels.py), convolution's
# unfold/fold, BatchNorm, pooling, ReLU's backward, and a compiled entry's run-time
# variant for a layout no plan listed (tiers.prepare_variant: the call runs a loaded variant
# on copies meanwhile); after what a switch waits for, before
# the kernels that mostly serve tier 0 and the fused optimizer's (LSTM LM compiled step,
# warm, in-process alternating, min: 78 ms, 108 without the forward loop's kernel, 103
# without the backward's, 76 without the cross-entropy kernels (1.3 s of worker CPU);
# tier19. CNN step, one thread: 18.7 ms, 29.0 without the layers' kernels, 18.6 without
# cross-entropy's (2 s of worker CPU, queued ahead of BatchNorm's before); tier20); one that
# only tier 0 and the stand-in of a fused kernel still compiling asked for moves down to LATER
# (`demote`, compiler/cpu/kernels/loader.py `standing_in`: the CNN's BatchNorm and pooling kernels, 1.2 s of
# worker CPU that came before the fused kernels and were idle once those were in). LATER: a
# background compile's parfor upgrade, which must not hold back any of the others, even
# when submitted before them.
FIRST, STEADY, EAGER, LATER = 0, 1, 2, 3
