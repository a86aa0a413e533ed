# Scheduler: the step planner on a real KV cache with a simulated engine.
ix_add_test(test_sched SOURCES test_sched.c LIBS ix_sched)
