"""The compile queue's ranks (workers.py): a job's rank says what waits for it. Its own
module so that the kernels' loaders below the pool name a rank without importing it."""

# Queue ranks, lowest first. FIRST: what a switch or a caller's array path waits for.
# STEADY: hand-written kernels a compiled step runs at every call, and run-time variants
# no plan listed. EAGER: eager ops' elementwise kernels (numpy runs meanwhile; they mostly
# serve tier 0). LATER: kernels only tier 0 and stand-ins asked for,
# which must not hold back the others.
FIRST, STEADY, EAGER, LATER = 0, 1, 2, 3
