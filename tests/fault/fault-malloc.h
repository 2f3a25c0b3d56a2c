/* Allocation-failure injection for tests/test-fault.c: fault-malloc.c, linked
 * into the test executable, defines malloc and its relatives (the executable's
 * definitions come first in symbol lookup, so libclvarlen's calls reach them),
 * passes every call to the next definition (libc's, or the sanitizer's), and
 * fails exactly one allocation when armed: the n-th one called directly from
 * libclvarlen's code. Allocations by libc, the OpenCL driver and the test are
 * never failed.
 */
#ifndef CLVARLEN_TEST_FAULT_MALLOC_H
#define CLVARLEN_TEST_FAULT_MALLOC_H

/** Finds libclvarlen's code in the address space; 0 when the library is not a shared
 * object of its own (a static build: nothing can be told apart, the test skips). */
int fault_init(void);
/** From now on, the n-th allocation (n >= 1) called from libclvarlen fails. */
void fault_arm(long n);
/** Stops injecting; returns the number of library allocations counted while armed. */
long fault_disarm(void);
/** 1 once the armed allocation has been failed. */
int fault_fired(void);

#endif /* CLVARLEN_TEST_FAULT_MALLOC_H */
