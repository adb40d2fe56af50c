// Work of known duration: one thread busy-waits `duration_ns` nanoseconds of
// %globaltimer, then returns.
//
// Tests and the aligner's ground-truth checks need a kernel whose length is
// known without trusting the clocks being checked; a spin on globaltimer lasts
// at least `duration_ns` by that clock (the loop exits only once the timer has
// advanced that far), and overshoots by at most one timer update step.
// Optionally the start and end readings go into slots of a stamp buffer (the
// same [n_slots, 3] int64 layout as ctl_stamp: globaltimer, clock64, smid);
// a slot of -1 (or n_slots == 0) writes nothing.

static __device__ __forceinline__ unsigned long long ctl_globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ __forceinline__ unsigned int ctl_smid()
{
    unsigned int sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    return sm;
}

static __device__ __forceinline__ void ctl_put(long long* slots, int n_slots,
                                               int slot, unsigned long long t)
{
    if (slot < 0 || slot >= n_slots) return;
    long long* s = slots + 3 * (long long)slot;
    s[0] = (long long)t;
    s[1] = clock64();
    s[2] = (long long)ctl_smid();
}

extern "C" __global__ void ctl_spin(long long duration_ns, long long* slots,
                                    int n_slots, int begin_slot, int end_slot)
{
    const unsigned long long start = ctl_globaltimer();
    ctl_put(slots, n_slots, begin_slot, start);
    // Unsigned difference: correct even if the 64-bit timer wrapped (it
    // will not in practice: 2^64 ns is 584 years).
    const unsigned long long want =
        duration_ns > 0 ? (unsigned long long)duration_ns : 0ull;
    unsigned long long now = start;
    while (now - start < want) {
        now = ctl_globaltimer();
    }
    ctl_put(slots, n_slots, end_slot, now);
}
